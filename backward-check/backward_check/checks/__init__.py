"""The check families: each module checks one way autograd really calls a backward (values against a truth, strides,
writes, state, what backward returns, second order, the compiled backward) and names the traps it finds. runner.py
runs them; none of them knows of the pytest plugin."""
