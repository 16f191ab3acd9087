"""The actor core: cancel tokens (``_abort``), actors and their refs (``_actor``), the
mailbox (``_mailbox``), supervisors (``_supervisor``) and the runtime root (``_runtime``, which
also starts agents and provider connections for its users). Its public names are re-exported
from :mod:`actors`; the rest of the package builds on it."""
