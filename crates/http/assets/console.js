// aigw console: the only script of the console. Pages work without it; it adds the copy
// buttons and asks before a destructive form is sent.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  for (const button of document.querySelectorAll("button[data-copy]")) {
    button.hidden = false;
    button.addEventListener("click", async () => {
      const source = document.getElementById(button.dataset.copy);
      if (!source) return;
      const text = source.textContent.trim();
      let copied = false;
      try {
        if (navigator.clipboard && window.isSecureContext) {
          await navigator.clipboard.writeText(text);
          copied = true;
        }
      } catch (_) {
        copied = false;
      }
      if (!copied) {
        // Older browsers and plain-HTTP origins: select the text and copy the selection.
        const range = document.createRange();
        range.selectNodeContents(source);
        const selection = window.getSelection();
        selection.removeAllRanges();
        selection.addRange(range);
        try {
          copied = document.execCommand("copy");
        } catch (_) {
          copied = false;
        }
      }
      button.textContent = copied ? "Copied" : "Select and copy it by hand";
      const status = document.getElementById(button.dataset.copy + "-status");
      if (status) status.textContent = copied ? "The key is on the clipboard." : "";
    });
  }
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  }
});
