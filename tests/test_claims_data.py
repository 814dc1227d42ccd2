"""The claims and tables kept as data (bnexp/report/study_claims.yaml, study_sections.yaml, ics_claims.yaml) and
the table words of templates/columns.md.j2: every claim has what the report needs, the families a study claim
rests on are named as the tuning grid names them, and the header sets come out in the tables' order."""

from __future__ import annotations

from bnexp.analysis.study_runs import FAMILY_KEYS, OBJECTIVES
from bnexp.report.fmt import label, labels
from bnexp.report.ics_verdicts import DEF21_SHORT, DEF21_VIEWS, ONE_VIEW, RATE_MATCHED, RATE_MATCHED_VIEWS, SPECS
from bnexp.report.study_claims import RESTS_ON, SECTIONS, STUDY_CLAIMS, section_head


def test_every_study_claim_rests_on_families_of_its_own_study():
    assert set(SECTIONS) == set(STUDY_CLAIMS)
    for study, claims in STUDY_CLAIMS.items():
        rests = SECTIONS[study]["rests_on"]
        assert set(rests) == set(claims), study
        for name, families in rests.items():
            assert families, name
            for family, objective in families:
                assert len(family) == len(FAMILY_KEYS[study]) and objective in OBJECTIVES[study], (name, family)


def test_the_families_are_named_as_the_tuning_grid_names_them():
    # the names the report's tuning table gives these families (docs/studies/PLAN.md, amendment item 2)
    assert RESTS_ON["BS_GHOST"] == [("BN, m = 60", "accuracy"), ("ghost BN, g = 2, m = 60", "accuracy")]
    assert RESTS_ON["BS_DROP"] == [("BN, m = 16", "accuracy"), ("BN, m = 2", "accuracy"),
                                   ("LayerNorm, m = 16", "accuracy"), ("LayerNorm, m = 2", "accuracy")]
    assert RESTS_ON["IS_GAP_GROWS"] == [("m = 2", "accuracy"), ("m = 60", "accuracy")]
    assert RESTS_ON["NM_BN_GN"] == [("GroupNorm", "steps"), ("BN", "steps")]
    assert RESTS_ON["DP_NOBN_12"] == [("12 layers, no BN", "accuracy")]
    assert RESTS_ON["PL_CNN_RELU"] == [("CNN, relu, BN before g", "steps"), ("CNN, relu, BN after g", "steps")]


def test_a_study_table_has_its_rate_column_only_in_the_held_out_design():
    one, held = (section_head("batch_size", h)["columns"] for h in (False, True))
    assert [k for k, _ in held] == ["norm", "ghost", "m", "lr", "seeds", "final", "to_target_text"]
    assert [k for k, _ in one] == ["norm", "ghost", "m", "seeds", "final", "to_target_text"]
    assert dict(one)["to_target_text"] == "examples to 95% (reached)"
    assert [k for k, _ in section_head("depth", False)["columns"]][:3] == ["depth", "norm", "lr"]  # lr always there


def test_each_ics_claim_with_several_views_has_one_pre_registered_view():
    views: dict[str, list] = {}
    for s in SPECS:
        assert s.num != s.den and {s.num, s.den} <= {"BN", "no BN", "noisy BN"}
        assert s.claim.direction in (">", "<") and s.claim.threshold > 0
        views.setdefault(s.claim.name, []).append(s)
    for name, specs in views.items():
        assert len({s.view for s in specs}) == len(specs), name  # no view twice
        assert sum(s.preregistered for s in specs) == 1, name
        assert (len(specs) == 1) == (specs[0].view == ONE_VIEW), name
    assert {s.view for s in views["BN reduces gradient ICS"] if s.preregistered} == {"matched training progress"}
    assert RATE_MATCHED_VIEWS == {s.view for s in SPECS if s.col.startswith(RATE_MATCHED)}
    assert len(RATE_MATCHED_VIEWS) == 2 and all(v.endswith("at equal rates") for v in RATE_MATCHED_VIEWS)


def test_header_sets_follow_the_tables_columns():
    assert labels("main_table", [0.9, 0.95]) == ["configuration", "runs", "max test acc (%)", "final test acc (%)",
                                                 "steps to 90%", "steps to 95%", "diverged", "failed"]
    head = labels("noise_strength", ("ks_first", "w1_rel_first", "w1_first"), [0.95])
    assert len(head) == 3 + 3 + 3 + 1 and head[-1] == "steps to 95%" and head[3] == "KS from the start"
    assert labels("frontier", None, [0, 1], []) == ["preset", "budget (steps)", "test acc, seed mean (%)",
                                                    "seed 0 (%)", "seed 1 (%)", "train acc, seed mean (%)"]
    assert labels("frontier", [0, 1], [0, 1], [2])[2] == "test acc, mean of decision seeds 0, 1 (%)"
    assert labels("frontier", [0, 1], [0, 1], [2])[5] == "seed 2, held out (%)"
    assert label("ics_column", "grad.cos") == "cos(G, G')" and label("no_config") == " [no config]"


def test_every_def21_view_and_only_those_has_a_short_name_in_the_docs_sentence():
    assert set(DEF21_SHORT) == set(DEF21_VIEWS) and len(DEF21_VIEWS) == 4
    for view, short in DEF21_SHORT.items():
        assert short and short in view and not short.startswith("Def.")  # the sentence names "Def. 2.1" once
