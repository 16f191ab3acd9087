"""The demo shows what its runs cost (issue 27, section 4): at the simulator's made-up price,
said to be so; ``unknown`` for a run whose cost is not known (never a floor); a narrow terminal
keeps the answers and moves the cost to the summary line."""

from __future__ import annotations

import io
import pathlib
from decimal import Decimal

from rich.console import Console

from actors.cli._demo import (
    SIMULATED_PRICES,
    Endpoint,
    MemberProgress,
    cost_text,
    results_table,
    run_team,
    team,
    total_cost,
)
from actors.testing import Simulator
from protocols.accounting import Cost
from protocols.messages import AgentResult, Usage


def console(width: int) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=width, height=40, color_system=None), out


def rows(text: str) -> dict[str, str]:
    return {line.split()[0]: line for line in text.splitlines() if line[1:7] == "agent-"}


async def test_the_team_table_shows_each_runs_cost_at_the_simulators_made_up_price(
    tmp_path: pathlib.Path,
) -> None:
    wide, out = console(120)
    report = await run_team(wide, agents=4, interval=0, db=tmp_path / "c.sqlite3")
    text = out.getvalue()
    shown = rows(text)
    by_role = {p.member.role: p for p in report.members}
    counted = by_role["count"].result
    assert counted is not None
    assert counted.usage is not None
    expected = SIMULATED_PRICES.amount(counted.usage)
    assert counted.usage.cost == Cost(expected, "USD", "computed")
    assert f" ${format(expected.normalize(), 'f')} " in shown["agent-02"]
    # The cancelled run reported nothing, the budget's cut turn neither: unknown, not a floor.
    assert shown["agent-03"].split().count("unknown") == 2  # its tokens and its cost
    budget = by_role["budget"].result
    assert budget is not None
    assert budget.usage is not None
    cells = shown["agent-04"].split()
    assert cells[cells.index(f"~{budget.usage.total}") + 1] == "unknown"  # tokens, then cost
    for name in ("agent-03", "agent-04"):
        assert "$" not in shown[name]
    assert "cost unknown (2 run(s) unknown), at the simulator's made-up price" in text
    assert "not a real one" in text
    # A narrow terminal: no cost column (the answers keep their room), the summary line stays.
    narrow, out = console(80)
    narrow.print(results_table(report.members, cost=False))
    assert "$" not in out.getvalue()
    assert "The answer is 42." in out.getvalue()


async def test_an_endpoint_without_prices_shows_unknown_never_a_price(
    tmp_path: pathlib.Path,
) -> None:
    async with Simulator() as server:
        endpoint = Endpoint(model="simulator", base_url=server.openai_base_url, api_key="k")
        wide, out = console(120)
        await run_team(wide, agents=2, endpoint=endpoint, db=tmp_path / "e.sqlite3")
    # genai-prices (installed with the tests) has no price for a local server's model.
    assert "$" not in out.getvalue()
    assert "cost unknown (2 run(s) unknown), at genai-prices' data" in out.getvalue()


def test_costs_are_shown_as_known_unknown_or_not_priced() -> None:
    priced = AgentResult(usage=Usage(3, 4, cost=Cost(Decimal("0.0010"), "USD", "computed")))
    euros = AgentResult(usage=Usage(3, 4, cost=Cost(Decimal(2), "EUR", "reported")))
    unknown = AgentResult(usage=Usage(3, 4, cost=Cost.unavailable("USD")))
    assert cost_text(priced) == "$0.001"
    assert cost_text(euros) == "2 EUR"
    assert cost_text(unknown) == "unknown"
    assert cost_text(AgentResult(usage=Usage(3, 4))) == "-"
    assert cost_text(AgentResult(usage=None)) == "unknown"
    assert cost_text(None) == "-"
    assert total_cost([priced, priced]) == "cost $0.002"
    assert total_cost([priced, unknown]) == "cost unknown (1 run(s) unknown)"
    assert total_cost([priced, euros]) == "cost unknown (mixed currencies)"
    assert total_cost([AgentResult(usage=Usage(1, 1))]) is None
    members = [MemberProgress(member, result=priced) for member in team(1)]
    out = io.StringIO()
    Console(file=out, width=120, color_system=None).print(results_table(members))
    assert " $0.001 " in out.getvalue()
