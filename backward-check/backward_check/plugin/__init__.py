"""The pytest plugin's side of the package (pytest_backward_check.py is its entry): recording a suite's calls, choosing
which to check within the budget, the worker process that checks them (the parent's handle and the child's loop), the
verdicts as plain data, the table, the accepted file, pytest-xdist's merge and the repro scripts."""
