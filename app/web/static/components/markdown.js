// A tiny, safe Markdown renderer: it builds DOM nodes and sets only textContent (never
// innerHTML), so model text cannot inject HTML. Supports paragraphs, headings, fenced code,
// bullet/numbered lists, `code`, **bold**, *italic* and [links](https://…) (http(s) only).

export function renderMarkdown(text) {
  const root = document.createDocumentFragment();
  const lines = text.replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (line.startsWith("```")) {
      const pre = document.createElement("pre");
      const code = document.createElement("code");
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].startsWith("```")) body.push(lines[i++]);
      i += 1;
      code.textContent = body.join("\n");
      pre.appendChild(code);
      root.appendChild(pre);
    } else if (/^#{1,6} /.test(line)) {
      const level = Math.min(line.indexOf(" ") + 2, 6);  // h3..h6 inside a message
      const h = document.createElement(`h${level}`);
      inline(h, line.replace(/^#+ /, ""));
      root.appendChild(h);
      i += 1;
    } else if (/^\s*([-*]|\d+\.) /.test(line)) {
      const ordered = /^\s*\d+\. /.test(line);
      const list = document.createElement(ordered ? "ol" : "ul");
      while (i < lines.length && /^\s*([-*]|\d+\.) /.test(lines[i])) {
        const li = document.createElement("li");
        inline(li, lines[i].replace(/^\s*([-*]|\d+\.) /, ""));
        list.appendChild(li);
        i += 1;
      }
      root.appendChild(list);
    } else if (line.trim() === "") {
      i += 1;
    } else {
      const p = document.createElement("p");
      const para = [];
      while (i < lines.length && lines[i].trim() !== "" && !lines[i].startsWith("```")
             && !/^#{1,6} /.test(lines[i]) && !/^\s*([-*]|\d+\.) /.test(lines[i])) {
        para.push(lines[i++]);
      }
      inline(p, para.join("\n"));
      root.appendChild(p);
    }
  }
  return root;
}

const INLINE = /(`[^`]+`)|(\*\*[^*]+\*\*)|(\*[^*\s][^*]*\*)|(\[[^\]]+\]\([^)\s]+\))/;

function inline(parent, text) {
  while (text) {
    const m = INLINE.exec(text);
    if (!m) {
      parent.appendChild(document.createTextNode(text));
      return;
    }
    if (m.index) parent.appendChild(document.createTextNode(text.slice(0, m.index)));
    const token = m[0];
    let node;
    if (m[1]) {
      node = document.createElement("code");
      node.textContent = token.slice(1, -1);
    } else if (m[2]) {
      node = document.createElement("strong");
      inline(node, token.slice(2, -2));
    } else if (m[3]) {
      node = document.createElement("em");
      inline(node, token.slice(1, -1));
    } else {
      const [, label, href] = /^\[([^\]]+)\]\(([^)\s]+)\)$/.exec(token);
      if (/^https?:\/\//i.test(href)) {
        node = document.createElement("a");
        node.href = href;
        node.rel = "noopener noreferrer nofollow";
        node.target = "_blank";
        node.textContent = label;
      } else {
        node = document.createTextNode(token);  // javascript: and friends stay plain text
      }
    }
    parent.appendChild(node);
    text = text.slice(m.index + token.length);
  }
}
