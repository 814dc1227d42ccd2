"""``hydra/launcher=stacked``: bnexp's Hydra launcher that trains many runs of a sweep in one process
(:mod:`hydra_plugins.bnexp_stacked_launcher.stacked_launcher`, docs/stacked.md)."""
