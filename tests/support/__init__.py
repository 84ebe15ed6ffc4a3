"""Plain modules that tests and tests/plugins/ share: no hooks, no fixtures, no tests. A test module
never imports another test module or the conftest (tests/test_house.py checks); what two of them need
lives here."""
