"""The package's own tests: `pytest --pyargs backward_check.tests` from an installed copy (with the [test] extra),
or `pytest backward-check/backward_check/tests` in a clone. Each runs small generated suites under the plugin in a
subprocess, and needs nothing of the repository the package came from."""
