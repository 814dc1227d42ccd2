"""The analysis layer: what the sweep designs (:mod:`bnexp.designs`) and the report (:mod:`bnexp.report`)
both read from finished runs, below both of them (docs/development.md names the layers; tests/test_layout.py
holds them).

* :mod:`.runs`: a sweep's run folders read and checked once into the per-run table and the long record tables;
* :mod:`.rules`: each rule once: chance, the sample std, the censored value (a bound) and how it is written,
  the normalizer vocabulary, how a config option is read;
* :mod:`.interval`: the one interval method (Student-t over seeds);
* :mod:`.tuning`: the rate choice (on the tuning seeds, or the one-stage best rate) and the MNIST targets;
* :mod:`.study_runs`: a study's runs (cells), the rate each family is scored at and the runs it scores;
* :mod:`.frontier`: the Sec. 4.2 budget-accuracy frontier's arithmetic (B(a), S(a), the pass rules);
* :mod:`.ics_design`: the ICS study's design record (ics_design.json), written by the design, read by the report.

Nothing here imports :mod:`bnexp.designs` or :mod:`bnexp.report`. The text here is what report.json records
as data (the rate rules' sentences, the frontier's claims, a study family's label) and
:meth:`.rules.Bound.written`, the one mark of a bound (">= 3.00x"); report.md's wording is the report's templates'.
"""
