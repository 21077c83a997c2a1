"""Example training code shipped with the runtime (used by the quickstart and the tests)."""
