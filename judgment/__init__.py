"""The comparative-judgment format (WebPRMBench's pairwise prompt and answer) that the teacher, the
training rows, PRM evaluation and search share: rendering (``judgment.format``), reading back
(``judgment.parse``), the AXTree cutter (``judgment.axtree``), untrusted text
(``judgment.untrusted``) and a run's sampled pairs rendered for judging (``judgment.pairs``).
Just above ``data`` in the layering, so ``llm`` (scoring answer tags) reaches it too."""
