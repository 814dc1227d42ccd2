"""Study designs: the sweeps that reproduce the paper and the studies, as plans of runs."""
