"""The steps of one run of an agent, around its loop (:class:`~actors._run_loop._Run`): taking
the request (:func:`execute`: its trace, its outcome delivered however it ends), the run's one
cancel scope with its deadline, abort and budget (:func:`run_request`: a cut commits what was
produced), and a handoff to another agent (:func:`hand_off`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from protocols.accounting import BudgetMeter, Pricing, TeamBudget, TokenBudget
from protocols.live import terminal_for
from protocols.messages import (
    AgentResult,
    StopReason,
)

from . import _guarding, _tracing
from ._core._actor import ActorStopped
from ._pricing import run_rates
from ._request import AgentStatus, _chain, _described, _Request, _State
from ._run_loop import (
    AgentEvent,
    _Run,
)
from ._run_options import RunOptions
from .conversation import Conversation
from .providers._interface import _RETRY_OBSERVERS

if TYPE_CHECKING:
    from .agent import Agent


async def execute(agent: Agent, request: _Request) -> None:
    """Run ``request`` (already begun) to its end, delivering its outcome."""
    agent.status = AgentStatus.RUNNING
    agent._runs += 1
    number = agent._runs
    trace: _tracing.RunTrace | None = None
    private: Conversation | None = None  # a run on a history: its own, for the run only
    chain = _chain.set(request.chain)
    try:
        if request.history is not None and request.conversation is None:
            private = await agent._new_conversation(request.history, compacting=False)
            request.conversation = private
        if request.tracer is not None:
            conversation = request.conversation or agent.conversation
            trace = request.trace = _tracing.RunTrace(
                request.tracer,
                request.parent,
                agent=agent.name,
                provider=agent.provider,
                conversation=conversation.id,
                run_id=request.run_id,
            )
        result = await run_request(agent, request, number)
    except Exception as error:
        if trace is not None:
            trace.fail(error)
        agent.status = AgentStatus.ERROR
        agent._statistics["errors"] += 1
        request.error = error
        request.end_log("failed", {"error": _described(error)})
        request.deliver(("error", error))
        agent._event(request, AgentEvent("error", number, error=error, run_id=request.run_id))
    except BaseException as error:
        run = request.run
        agent.status = AgentStatus.DONE  # it ended, partially
        if trace is not None:
            trace.cut(run.cut_reason() if run is not None else StopReason.CANCELLED)
        if run is not None and not isinstance(error, Exception):
            # (Cancelled, or a group of them out of a tool batch's nursery.)
            # Cut from outside -- with the run it was delegated from, or its agent stopping:
            # its partial was committed; its listeners still hear how it ended.
            agent._statistics["runs"] += 1
            stop = run.cut_reason()
            run.event("abort", reason=run.token.reason or stop.value, stop=stop)
            run.event("finish", stop=stop, partial=True, finish=run.finish)
        if request.forward is None:
            # The agent is being stopped: its caller must not wait for the run (its log
            # ends ``failed`` with the error the caller gets).
            request.fail(
                ActorStopped(f"agent {agent.name!r} stopped during the run", name=agent.name)
            )
        elif run is not None:
            # Cut with the run it was delegated from (or handed from): ``cancelled``, with
            # what it had done.
            cut = run.result(run.cut_reason())
            request.end_log(terminal_for(cut), cut)
        else:
            request.close_log()  # cut before its loop began: ``cancelled``, nothing done
        raise
    else:
        if trace is not None:
            trace.finish(result)
        agent.status = AgentStatus.DONE
        agent._statistics["runs"] += 1
        request.result = result
        request.end_log(terminal_for(result), result)
        request.deliver(("result", result))
        if agent._listeners or request.forward_event is not None:
            finish = AgentEvent(
                "finish",
                number,
                turn=result.turns,
                stop=result.stop,
                partial=result.partial,
                run_id=request.run_id,
                finish=result.finish,
            )
            agent._event(request, finish)
    finally:
        if private is not None:
            with trio.CancelScope(shield=True):
                await private.stop()
        if trace is not None:
            trace.end()  # whatever happened, the run's span ends with it (once)
        _chain.reset(chain)
        request.state = _State.DONE
        request.finished.set()
        request.close()
        # No reference cycle outlives the run (the chain holds the request itself; the run
        # its request and its callbacks): what is left is freed when its readers are done.
        request.chain = ()
        if request.run is not None:
            request.run.release()


async def run_request(agent: Agent, request: _Request, number: int) -> AgentResult:
    options = request.options
    limit: int = agent._option(options, "limit")
    timeout: float | None = agent._option(options, "timeout")
    meter = _meter_for(
        agent._option(options, "budget"),
        request.meters,
        agent._option(options, "pricing"),
        agent.provider,
    )
    run = _Run(agent, request, meter, number)
    request.run = run
    token = run.token
    resume = request.resume
    if resume is not None:
        run.resumed(resume)  # what it spent before counts toward its limits
    if request.input:
        await run.add(*request.input)
    run.started()
    if token.cancelled or (meter is not None and meter.spent):
        stop = StopReason.CANCELLED if token.cancelled else StopReason.BUDGET
        if resume is not None and resume.decisions:
            # A continued run cut before it began (its job was cancelled while its worker
            # was dead): the batch the crash left open is answered, never run.
            await run.close_batch(resume.decisions)
        run.event("abort", reason=token.reason or "budget", stop=stop)
        return run.result(stop)
    raced: BaseException | None = None
    deadline = request.deadline
    if timeout is not None:
        deadline = min(deadline, trio.current_time() + timeout)
    # (The deadline given to the scope when it is made: setting it afterwards costs trio a
    # context manager more on every run.)
    with trio.CancelScope(deadline=deadline) as scope:
        # (What token.bind(scope) and observe_retries(run.retried) do, without the price of
        # two context managers on every run.)
        untie = token.on_cancel(scope.cancel)
        run.scope = scope
        untrip = _cut_on_trip(meter, run, scope)
        observed = _RETRY_OBSERVERS.set((*_RETRY_OBSERVERS.get(), run.retried))
        try:
            if resume is not None and resume.decisions:
                await run.finish_batch(resume.decisions)
            stop = await run.turns(limit)
            if run.handoff is not None:
                stop = await hand_off(agent, run)
            if stop is StopReason.COMPLETE and (agent.defaults.guardrails or options.guardrails):
                stop = await _guarding.after(run, agent._guardrails(options))
        except BaseException as error:
            # A genuine failure, a cut (committed once: a second commit finds nothing), or
            # the agent stopped from outside: the history is left well formed either way.
            await run.commit_partial()
            raced = _raced(error, scope)
            if raced is None:
                raise
        finally:
            _RETRY_OBSERVERS.reset(observed)
            untrip()
            untie()
    if scope.cancelled_caught or raced is not None:
        if run.budget_tripped:
            stop = StopReason.BUDGET
        elif trio.current_time() >= scope.deadline:
            # The deadline had passed when the cut landed: a timeout, also when a caller
            # gave up at that same moment (a parent cut by its own deadline does so).
            stop = StopReason.TIMEOUT
        else:
            stop = StopReason.CANCELLED
        await run.commit_partial()
        reason = "budget" if stop is StopReason.BUDGET else token.reason or stop.value
        run.event("abort", reason=reason, stop=stop, error=raced)
    elif stop is StopReason.BUDGET:  # spent by a turn's reported usage, between turns
        run.event("abort", reason="budget", stop=stop)
    return run.result(stop)


async def hand_off(agent: Agent, run: _Run) -> StopReason:
    """The last batch handed the turn to ``run.handoff``: it answers, in this run's
    conversation and scope; its work becomes this run's."""
    target = run.handoff
    assert target is not None
    run.handoff = None
    run.answered_by = target.name  # from now on, whatever the run shows is the target's
    request = _Request(
        target,
        (),
        RunOptions(),
        None,
        run_id=run.run_id,
        path=run.path,
        conversation=run.conversation,
        deps=run.deps,
        # The same run, answered on by another agent: its events go on in the run's log.
        live=run.request.live,
        owns_log=False,
        forward=run.emit,
        forward_event=run.request.forward_event,
        deadline=run.deadline(),
        meters=(run.meter,) if run.meter is not None else (),
    )
    if run.trace is not None:
        # A child of the span of the handoff's tool call (else of this run's span).
        target._traced(request, run.handed_from or run.trace.context)
    try:
        result = await target._execute_here(request)
    finally:
        handed = request.run
        if handed is not None:
            run.appended.extend(handed.appended)
            run.thinking.extend(handed.thinking)
            run.turns_made += handed.turns_made
            run.usage = (
                None if run.usage is None or handed.usage is None else (run.usage + handed.usage)
            )
            run.delegated_to(handed.delegated)
            run.estimated = run.estimated or handed.estimated
            if handed.finish is not None:  # its last provider call is the run's last
                run.finish = handed.finish
    run.answered_by = result.agent  # the target may have handed on in turn
    run.output = result.output
    run.tripped = result.guardrail  # (the target's own guardrails checked its run)
    return result.stop


def _raced(error: BaseException, scope: trio.CancelScope) -> BaseException | None:
    """The failure that raced the run's own cut (notes/000.md G17): ``error`` leaving the run
    once its scope had been cancelled (its abort, deadline or budget) -- the cut outranks it,
    and it becomes the cut's cause -- or ``None``: not cut, so a genuine failure that
    propagates; or only ``Cancelled`` (the scope takes it) or something that is no
    ``Exception`` (``KeyboardInterrupt``), which propagate. Out of a group, the failures
    without the ``Cancelled`` (the one failure itself when there is one)."""
    if not scope.cancel_called:
        return None
    if isinstance(error, BaseExceptionGroup):
        _, rest = error.split(trio.Cancelled)
        if rest is None or not isinstance(rest, ExceptionGroup):
            return None
        return rest.exceptions[0] if len(rest.exceptions) == 1 else rest
    return error if isinstance(error, Exception) else None


def _meter_for(
    budget: TokenBudget | TeamBudget | None,
    parents: tuple[BudgetMeter, ...],
    pricing: Pricing | None = None,
    provider: object = None,
) -> BudgetMeter | None:
    """The meter of a run (``None``: nothing to count). With ``pricing``, it charges money at
    the rates of ``provider``'s model; a money cap without them is refused here, when the run
    starts (:meth:`BudgetMeter.check_prices`: a ``ConfigError``)."""
    if isinstance(budget, TeamBudget):
        own, parents = None, (budget.meter, *parents)
    elif budget is not None:
        own = budget
    elif parents:
        own = None
    else:
        return None
    prices = run_rates(pricing, provider) if pricing is not None else None
    meter = BudgetMeter(own, parents=parents, prices=prices)
    meter.check_prices()
    return meter


def _cut_on_trip(
    meter: BudgetMeter | None, run: _Run, scope: trio.CancelScope
) -> Callable[[], None]:
    """Cut ``run`` when its meter, or any meter it draws on, is spent (by whichever run's
    charge); returns a function that stops watching."""
    if meter is None:
        return _nothing

    def cut() -> None:
        run.budget_tripped = True
        scope.cancel()

    removers = []
    stack = [meter]
    seen: set[int] = set()
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if current.budget is not None:
            removers.append(current.on_trip(cut))
        stack.extend(current.parents)

    def stop_watching() -> None:
        for remove in removers:
            remove()

    return stop_watching


def _nothing() -> None:
    pass
