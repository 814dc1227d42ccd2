"""The training loop and its measurements: the step loop, evaluations, monitor records, ICS measures."""
