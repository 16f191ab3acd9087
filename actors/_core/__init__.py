"""The actor core: cancel tokens (``_abort``), actors and their refs (``_actor``), the
mailbox (``_mailbox``), supervisors (``_supervisor``) and the runtime root (``_runtime``). It is
the bottom layer of ``actors``: it imports nothing of the package outside ``actors/_core``
(``tests/test_import_graph.py`` pins this). Its public names are re-exported from :mod:`actors`,
where ``Runtime`` and ``open_runtime`` are the feature-complete ones of ``actors/_runtime.py``."""
