"""prm.split and prm.stats, which bench/prm_cpu.py sizes its runs with: the split by task template,
the evaluation sample of whole states, equal-size training sets, the correctness rules, the
intervals; and prm.evaluate's ``--judge-mode score`` with both orders on a tiny model."""

from __future__ import annotations

import random

import pytest

from prm.split import fill_to, sample_states, split_by_template, task_template
from prm.stats import bootstrap, is_correct, state_table

TASKS = [f"workarena.servicenow.{name}_{seed}" for name in
         ("order-ipad-pro", "order-ipad-mini", "all-menu", "knowledge-base-search", "order-loaner-laptop",
          "order-sales-laptop", "order-apple-watch", "order-developer-laptop")
         for seed in (2, 11, 14)]


def test_task_template_strips_only_the_seed_suffix():
    assert task_template("workarena.servicenow.order-ipad-pro_14") == "workarena.servicenow.order-ipad-pro"
    assert task_template("workarena.servicenow.order-apple-mac-book-pro15_3") == \
        "workarena.servicenow.order-apple-mac-book-pro15"
    assert task_template("webarena.410") == "webarena.410"      # no seed suffix: unchanged


def test_split_holds_out_whole_templates_deterministically():
    train, test = split_by_template(TASKS, seed=42, test_fraction=0.25)
    assert train | test == set(TASKS) and not train & test
    held = {task_template(t) for t in test}
    assert held and not held & {task_template(t) for t in train}        # no template on both sides
    assert len(held) == 2                                                # 25% of 8 templates
    assert all(t in test for t in TASKS if task_template(t) in held)     # every seed of a held template
    assert split_by_template(reversed(TASKS), seed=42, test_fraction=0.25) == (train, test)
    assert split_by_template(TASKS, seed=7, test_fraction=0.25) != (train, test)


def _rows(n_states: int, per_state: int):
    return [{"traj_id": f"t{s // 3}", "step_idx": s % 3, "pair_id": f"p{s}-{i}"}
            for s in range(n_states) for i in range(per_state)]


def test_eval_sample_spreads_over_states():
    rows = _rows(20, 3)
    chosen = sample_states(rows, 10, seed=1, per_state=2)
    states = [(r["traj_id"], r["step_idx"]) for r in chosen]
    assert len(chosen) == 10 and len(set(states)) == 5                    # two pairs from each of five states
    assert len({r["pair_id"] for r in chosen}) == 10
    assert chosen == sample_states(rows, 10, seed=1, per_state=2)
    assert len(sample_states(rows, 1000, seed=1, per_state=3)) == len(rows)
    assert len(sample_states(rows, 7, seed=1, per_state=3)) == 7         # the last state is cut to the size


def test_training_sets_are_filled_to_the_same_size():
    rows = [{"pair_id": str(i)} for i in range(5)]
    out = fill_to(rows, 12, seed=0)
    assert len(out) == 12
    ids = [r["pair_id"] for r in out]
    assert sorted(ids[:5]) == sorted(ids[5:10]) == [str(i) for i in range(5)]   # each pass covers every row
    assert len(fill_to(rows, 3, seed=0)) == 3 and fill_to([], 3, seed=0) == []


def _records(correct_by_state: dict) -> list[dict]:
    return [{"source_name": "s", "state": st, "correct": c} for st, cs in correct_by_state.items() for c in cs]


def test_state_table_and_metrics():
    t = state_table(_records({0: [True, True], 1: [True, False], 2: [False]}))
    assert t == {("s", 0): (2, 2), ("s", 1): (1, 2), ("s", 2): (0, 1)}
    point = bootstrap([t], None, n=50)
    assert (point["pairwise"], point["bon"], point["states"]) == (3 / 5, 1 / 3, 3)
    two_seeds = bootstrap([t, {k: (n, n) for k, (_, n) in t.items()}], None, n=50)
    assert (two_seeds["pairwise"], two_seeds["bon"]) == ((3 / 5 + 1) / 2, (1 / 3 + 1) / 2)   # mean over seeds
    one = bootstrap([{("s", 0): (1, 2)}], [{("s", 0): (0, 2)}], n=50)     # one state: nothing to resample
    assert one["pairwise_ci"] == [0.5, 0.5] and one["pairwise_diff_ci"] == [0.5, 0.5] and one["beats_base"]


def test_bootstrap_paired_difference():
    rng = random.Random(0)
    states = {s: [rng.random() < 0.5 for _ in range(2)] for s in range(40)}
    base = [state_table(_records(states))]
    same = bootstrap(base, base, n=200)
    assert same["pairwise_diff"] == 0 and same["pairwise_diff_ci"] == [0, 0] and not same["beats_base"]
    assert same["pairwise_ci"][0] <= same["pairwise"] <= same["pairwise_ci"][1]
    perfect = [state_table(_records({s: [True] * len(v) for s, v in states.items()}))] * 3
    better = bootstrap(perfect, base, n=200)
    assert better["pairwise"] == 1.0 and better["bon"] == 1.0 and better["beats_base"]
    assert better["pairwise_diff_ci"][0] > 0
    assert bootstrap(perfect, base, n=200, seed=3) == bootstrap(perfect, base, n=200, seed=3)   # seeded
    # the interval of the same figures as before scipy (a hand-rolled percentile bootstrap): a 95%
    # interval of a pairwise accuracy near 1/2 over 40 states of 2 pairs is about +-8 points
    lo, hi = same["pairwise_ci"]
    assert 0.12 < hi - lo < 0.22


def test_evaluate_scores_both_orders_on_a_tiny_model():
    pytest.importorskip("transformers")
    from data.state import State
    from judgment.format import render_pair
    from prm.evaluate import evaluate
    from prm.judge import LocalJudge
    from tiny_lm import tiny_lm

    state = State(intent="Order an iPad", axtree="[1] RootWebArea 'Shop'\n\t[12] button 'Order'\n\t[40] link 'Home'",
                  url="http://shop/ipad")
    prompts = [render_pair(state, a, b)[0] for a, b in [("click('12')", "click('40')"), ("click('40')", "click('12')")]]
    model, tok = tiny_lm([m["content"] for p in prompts for m in p] + ["<Answer>Response 1</Answer>"])
    rows = [{"state": 0, "source_name": "s", "prompt": p, "expected": e, "pair_idx": i, "pair_id": str(i)}
            for i, (p, e) in enumerate(zip(prompts, (1, 2)))]
    metrics, records = evaluate(LocalJudge(model, tok, mode="score"), rows, both_orders=True)
    assert metrics["unparsed"] == 0 and metrics["position"]["judged_both_orders"] == 2
    assert all(r["margin"] is not None and r["swapped_margin"] is not None for r in records)
    for r in records:      # a verdict is the sign of its margin, in each order
        assert r["verdict"] == (1 if r["margin"] >= 0 else 2)
        assert r["swapped_verdict"] == (1 if r["swapped_margin"] >= 0 else 2)


def test_the_three_correctness_rules():
    # expected 1; as given the judge names 2 (wrong), swapped it names 2 (= the demonstrated action):
    # position-biased, so wrong under both orders; the margins still prefer the demonstrated action
    r = {"correct": False, "expected": 1, "verdict": 2, "swapped_verdict": 2, "margin": -0.5, "swapped_margin": -2.0}
    assert not is_correct(r, "both_orders") and not is_correct(r, "as_given") and is_correct(r, "debiased")
    r = {"correct": True, "expected": 2, "verdict": 2, "swapped_verdict": 1, "margin": -1.0, "swapped_margin": 1.0}
    assert all(is_correct(r, rule) for rule in ("both_orders", "as_given", "debiased"))
    assert not is_correct({**r, "margin": None}, "debiased")         # generated verdicts have no margin
