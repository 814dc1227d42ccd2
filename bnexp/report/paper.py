"""Which part of the BN paper (Ioffe & Szegedy 2015) a sweep's figures and tables reproduce.

* Sec. 4.1 "Activations over time": MNIST, a 3-layer sigmoid network, Fig. 1(a) test
  accuracy vs steps with and without BN, Fig. 1(b, c) the 15th/50th/85th percentiles of a
  typical last-layer sigmoid input over training.
* Sec. 4.2 "ImageNet classification": Inception and its BN variants (Fig. 2: validation
  accuracy vs steps; Fig. 3: steps to reach Inception's best accuracy). bnexp runs the same
  comparison on CIFAR-10 with the CNN presets (``+experiment=baseline,bn_baseline,...``).

Fig. 1(b, c)'s percentile view is Sec. 4.1's method; on a CIFAR-10 sweep it is that method
applied to the Sec. 4.2 networks, and the headings say so.
"""

from __future__ import annotations

from bnexp.report.build import Report


def sweep_section(report: Report) -> str:
    """ "4.2" for a CIFAR-10 sweep or one with the Sec. 4.2 presets table, else "4.1" (MNIST and
    anything else compared with and without BN)."""
    names = {str(g.config.get("data.name", "")).lower() for g in report.groups}
    if report.data.get("sec42") or any(n.startswith("cifar") for n in names):
        return "4.2"
    return "4.1"


def refs(report: Report) -> dict[str, str]:
    """The paper references of the report's parts, for headings, titles and image captions.

    Returns:
        {"accuracy": test accuracy vs steps, "percentiles": the typical unit's percentiles,
        "stability": per-layer stability, "speedup": the BN-over-no-BN speedup table}.
    """
    if sweep_section(report) == "4.2":
        return {"accuracy": "Sec. 4.2, Fig. 2 form, on CIFAR-10",
                "percentiles": "Sec. 4.1's Fig. 1(b, c) view, on CIFAR-10",
                "stability": "Sec. 4.1's Fig. 1(b, c) view, on CIFAR-10",
                "speedup": "Sec. 4.2, on CIFAR-10"}
    return {"accuracy": "Sec. 4.1, Fig. 1(a)", "percentiles": "Sec. 4.1, Fig. 1(b, c)",
            "stability": "Sec. 4.1, Fig. 1(b, c)", "speedup": "Sec. 4.1, Fig. 1(a)"}
