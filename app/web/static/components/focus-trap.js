// Keeps Tab and Shift+Tab inside a modal <dialog>: from its last control Tab goes back to its
// first, and Shift+Tab from its first (or from the dialog's heading) to its last. showModal()
// makes the page behind inert, but without this the focus would leave for the browser's own UI.

const FOCUSABLE = "a[href], button, input, select, textarea, summary, [tabindex]:not([tabindex='-1'])";

function focusables(dialog) {
  return [...dialog.querySelectorAll(FOCUSABLE)].filter(
    (e) => !e.disabled && !e.closest("[hidden]") && e.getClientRects().length > 0,
  );
}

export function trapFocus(dialog) {
  dialog.addEventListener("keydown", (e) => {
    if (e.key !== "Tab" || !dialog.open) return;
    const items = focusables(dialog);
    if (!items.length) return;
    const first = items[0];
    const last = items[items.length - 1];
    const inside = items.includes(document.activeElement);
    if (e.shiftKey && (document.activeElement === first || !inside)) {
      e.preventDefault();
      last.focus();
    } else if (!e.shiftKey && (document.activeElement === last || !inside)) {
      e.preventDefault();
      first.focus();
    }
  });
}
