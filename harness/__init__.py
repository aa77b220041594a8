"""The browser harness, below ``teacher`` in the layering: BrowserGym on Debian's chromium
(``harness.env``), MiniWoB++ tasks offline (``harness.miniwob``) and scripted MiniWoB++ solvers
(``harness.solvers``). ``search`` runs its episodes in it; ``teacher``'s replay verifier replays
actions in it."""
