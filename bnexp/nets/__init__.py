"""What a run trains: the datasets, the networks, and (in :mod:`bnexp.nets.bn`) the BN math."""
