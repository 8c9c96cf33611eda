// Building DOM nodes from data without HTML: every text goes in through `textContent`.

/**
 * A new element: `el("li", { class: "row", text: "…", "aria-label": "…" }, child, …)`.
 * `text` sets textContent, `class` the class name, anything else an attribute (null or
 * undefined: left unset); children are nodes or strings (strings become text nodes).
 */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null) continue;
    if (key === "text") node.textContent = value;
    else if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  node.append(...children);
  return node;
}
