"""Fill values through the LLM layer (App. D.3): the fields no demonstration gave a value.

A fill model that cannot answer in the asked format (the embedded 135M model never writes the JSON
object) is found out in seconds, not minutes: the first ``PROBE_PROMPTS`` distinct prompts are asked
once, and when none of the four gets a usable value every field is dropped (``fill_invalid_gave_up``,
counted) with one line saying so, instead of three answers for every field. The probe's answers
are the first attempt's (the LLM cache serves them again), so a usable model costs nothing more.
"""

from __future__ import annotations

import json
import sys
from collections import Counter

from cli.progress import progress
from proposals.affordance import FILL_ATTEMPTS, FILL_TEMPERATURE, valid_fill
from proposals.config import STAGE
from proposals.grounding import Pending


def complete_fills(pending: list[Pending], llm_config, seed: int, show_progress: bool = False,
                   replace=None) -> tuple[dict, dict]:
    """Ask for the missing fill values at temperature 0.2; an answer that fails
    ``valid_fill`` is asked again with the next seed, up to ``FILL_ATTEMPTS`` requests, and
    its field is then rejected with the last reason. ``replace(failed)``: the negatives that take
    the failed ones' slots (their own fills asked in turn), or None. Returns (LLM usage, fill counts)."""
    need = [p for p in pending if p.value_source == "llm"]
    counts = {"fields": 0, "valid_at_attempt": Counter(), "invalid_answers": Counter(), "replaced": 0}
    client, probed = None, False
    while need:
        from llm import LLMClient

        client = client or LLMClient(llm_config)
        counts["fields"] += len(need)
        if not probed and (errors := _probe(client, need, seed, show_progress)):
            counts["gave_up"] = {"probe_prompts": PROBE_PROMPTS, "invalid_answers": errors}
        probed = True
        failed = _give_up(need) if "gave_up" in counts else _ask(client, need, seed, counts, show_progress)
        spares = replace(failed) if replace and failed else []
        counts["replaced"] += len(spares)
        need = [p for p in spares if p.value_source == "llm"]
    usage = client.usage[STAGE].as_dict() if client is not None and STAGE in client.usage else {}
    return usage, {k: dict(sorted(v.items())) if isinstance(v, Counter) else v for k, v in counts.items()}


PROBE_PROMPTS = 4     # distinct prompts asked once before the rest: none usable, and the model is given up on


def _probe(client, need: list[Pending], seed: int, show_progress: bool) -> dict | None:
    """Ask the first ``PROBE_PROMPTS`` distinct prompts once (the first attempt's request); when
    there were that many, none got a usable value and no answer was an infrastructure failure (an
    outage is not the model's fault), say so in one line on stderr and return why each answer
    failed (the model is given up on); else None. Fewer fields are cheap to ask in full."""
    prompts = list({json.dumps(p.prompt, sort_keys=True): p for p in need}.values())[:PROBE_PROMPTS]
    with progress(len(prompts), f"{STAGE} fill values (probe)", unit="prompt", enabled=show_progress) as bar:
        answers = client.chat_many([p.prompt for p in prompts], stage=STAGE, on_result=lambda _: bar.update(1),
                                   temperature=FILL_TEMPERATURE, seed=seed, max_tokens=48)
    errors = Counter()
    for p, r in zip(prompts, answers):
        reason = "infra" if not r.ok else valid_fill(r.text, p.current, p.positive_value, p.numeric)[1]
        if reason:
            errors[reason] += 1
    if len(prompts) < PROBE_PROMPTS or sum(errors.values()) < len(prompts) or "infra" in errors:
        return None
    print(f"{STAGE}: the fill model gave no usable value to {len(prompts)} probe prompts "
          f"({', '.join(f'{n} {e}' for e, n in sorted(errors.items()))}): its {len(need)} fill negatives are "
          f"dropped (fill_invalid_gave_up); --fill-base-url/--fill-model for a model that answers the JSON "
          f"object, or --no-fill", file=sys.stderr)
    return dict(sorted(errors.items()))


def _give_up(todo: list[Pending]) -> list[Pending]:
    for p in todo:
        p.value, p.fill_error = None, "gave_up"
    return list(todo)


def _ask(client, todo: list[Pending], seed: int, counts: dict, show_progress: bool) -> list[Pending]:
    """Up to ``FILL_ATTEMPTS`` answers for each of ``todo``'s fields; returns those left without a value."""
    failed = []
    for attempt in range(FILL_ATTEMPTS):
        # Identical prompts (the same field on replicated or repeated pages) are asked once.
        prompts: dict[str, list] = {}
        for p in todo:
            prompts.setdefault(json.dumps(p.prompt, sort_keys=True), p.prompt)
        keys = list(prompts)
        with progress(len(keys), f"{STAGE} fill values (answer {attempt + 1}/{FILL_ATTEMPTS})", unit="prompt",
                      enabled=show_progress) as bar:
            answers = dict(zip(keys, client.chat_many([prompts[k] for k in keys], stage=STAGE,
                                                      on_result=lambda _: bar.update(1),
                                                      temperature=FILL_TEMPERATURE,
                                                      seed=seed + attempt, max_tokens=48)))
        retry = []
        for p in todo:
            r = answers[json.dumps(p.prompt, sort_keys=True)]
            if not r.ok:
                p.value, p.infra = None, r.infra_error
                failed.append(p)
                continue
            p.value, p.fill_error = valid_fill(r.text, p.current, p.positive_value, p.numeric)
            if p.value is None:
                counts["invalid_answers"][p.fill_error] += 1
                retry.append(p)
            else:
                counts["valid_at_attempt"][attempt + 1] += 1
        todo = retry
        if not todo:
            break
    return failed + todo
