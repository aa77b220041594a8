"""The audit's false negatives as §4.3 counts them: x of the whole sample, beside the rate of
the answered pairs ("cannot tell" left out)."""

from dataset.viewer.audit import annotator_summary, false_negatives_of_sample, format_summary


def _rows(choices, size):
    return [{"pair_id": f"p{i}", "choice": c, "teacher_choice": None, "rule": "r", "axis": "a", "sample_size": size}
            for i, c in enumerate(choices)]


def test_of_sample_counts_every_sampled_pair():
    rows = _rows(["pos", "neg", "both", "cannot_tell", "cannot_tell", "pos"], size=10)
    w = false_negatives_of_sample(rows)
    assert (w["k"], w["n"], w["cannot_tell"], w["unanswered"]) == (2, 10, 2, 4)
    s = annotator_summary(rows)
    assert (s["false_negatives"]["k"], s["false_negatives"]["n"]) == (2, 4)     # answered, cannot tell out
    assert s["false_negatives_of_sample"]["rate"] == 0.2
    text = format_summary({"annotators": {"ann": s}, "kappa": []})
    assert "2 of 10 (2 cannot tell, 4 unanswered)" in text and "of the answered pairs" in text


def test_of_sample_without_a_recorded_size_uses_the_answers():
    w = false_negatives_of_sample([{"choice": "both"}, {"choice": "pos"}])
    assert (w["k"], w["n"], w["unanswered"]) == (1, 2, 0)
