"""bnexp's Hydra launchers: ``hydra/launcher=stacked``, which trains many runs of a sweep in one process
(:mod:`hydra_plugins.bnexp_stacked_launcher.stacked_launcher`, docs/stacked.md), its submitit forms
``stacked_slurm``/``stacked_local`` (:mod:`~hydra_plugins.bnexp_stacked_launcher.stacked_submitit`), and
``hydra/launcher=slurm``'s check for SLURM (:mod:`~hydra_plugins.bnexp_stacked_launcher.slurm`)."""
