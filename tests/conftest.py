"""Makes this folder importable for every test (``postgres_server``: where the tests'
PostgreSQL comes from), however the tests are selected."""
