// surfprm pair viewer: progressive enhancement only; every page reads and works without it.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  // The list's filters apply as soon as one changes (the Filter button does it without script).
  for (const select of document.querySelectorAll("select[data-autosubmit]")) {
    select.addEventListener("change", () => select.form.submit());
  }

  // Bring the targets into view inside the observation: the positive's (Response 1's) first.
  const target = document.getElementById("target-pos") || document.getElementById("target-neg");
  if (target) {
    target.scrollIntoView({ block: "center" });
    window.scrollTo(0, 0);
  }

  // Audit: keys 1-4 answer, n goes to the note, Escape leaves it.
  const form = document.getElementById("answer-form");
  if (!form) return;
  const note = document.getElementById("note");
  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.target === note) {
      if (event.key === "Escape") note.blur();
      return;
    }
    const button = form.querySelector(`button[data-key="${event.key}"]`);
    if (button) {
      event.preventDefault();
      form.requestSubmit(button);
    } else if (event.key === "n") {
      event.preventDefault();
      note.focus();
    } else if (event.key === "ArrowLeft" || event.key === "ArrowRight") {
      const link = document.getElementById(event.key === "ArrowLeft" ? "prev" : "next");
      if (link) window.location.assign(link.href);
    }
  });
});
