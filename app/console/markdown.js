// Markdown to DOM nodes, safe by construction: every piece of text becomes a text node (never
// HTML), and only these elements are made: p, h1-h4, ul/ol/li, pre/code, strong, em, a, br.
// A link keeps only an http(s) or mailto URL. So a model's `<img onerror=...>` or `<script>`
// shows as text and runs nothing.

const SAFE_URL = /^(https?:|mailto:)/i;

export function renderMarkdown(source) {
  const root = document.createDocumentFragment();
  const lines = String(source).replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(/^```\s*([\w-]*)\s*$/);
    if (fence) {
      const body = [];
      i += 1;
      while (i < lines.length && !/^```\s*$/.test(lines[i])) body.push(lines[i++]);
      i += 1; // the closing fence (or the end: a block still streaming)
      const pre = el("pre");
      const code = el("code");
      if (fence[1]) code.dataset.lang = fence[1];
      code.append(text(body.join("\n")));
      pre.append(code);
      root.append(pre);
      continue;
    }
    const heading = line.match(/^(#{1,4})\s+(.*)$/);
    if (heading) {
      root.append(inline(el(`h${heading[1].length}`), heading[2]));
      i += 1;
      continue;
    }
    if (/^\s*([-*+]|\d+[.)])\s+/.test(line)) {
      const ordered = /^\s*\d+[.)]\s+/.test(line);
      const list = el(ordered ? "ol" : "ul");
      while (i < lines.length && /^\s*([-*+]|\d+[.)])\s+/.test(lines[i])) {
        list.append(inline(el("li"), lines[i].replace(/^\s*([-*+]|\d+[.)])\s+/, "")));
        i += 1;
      }
      root.append(list);
      continue;
    }
    if (!line.trim()) {
      i += 1;
      continue;
    }
    const para = [];
    while (
      i < lines.length &&
      lines[i].trim() &&
      !/^```/.test(lines[i]) &&
      !/^#{1,4}\s/.test(lines[i]) &&
      !/^\s*([-*+]|\d+[.)])\s+/.test(lines[i])
    ) {
      para.push(lines[i++]);
    }
    const p = el("p");
    para.forEach((part, n) => {
      if (n) p.append(el("br"));
      inline(p, part);
    });
    root.append(p);
  }
  return root;
}

// `code`, **strong**, *em* / _em_, [text](url): anything else is text.
const INLINE = /`([^`]+)`|\*\*([^*]+)\*\*|\*([^*\s][^*]*)\*|_([^_\s][^_]*)_|\[([^\]]+)\]\(([^)\s]+)\)/g;

function inline(parent, source) {
  let last = 0;
  for (const match of source.matchAll(INLINE)) {
    parent.append(text(source.slice(last, match.index)));
    const [whole, code, strong, em1, em2, label, url] = match;
    if (code !== undefined) parent.append(wrap("code", code));
    else if (strong !== undefined) parent.append(wrap("strong", strong));
    else if (em1 !== undefined || em2 !== undefined) parent.append(wrap("em", em1 ?? em2));
    else if (SAFE_URL.test(url)) {
      const a = wrap("a", label);
      a.href = url;
      a.rel = "noopener noreferrer";
      a.target = "_blank";
      parent.append(a);
    } else parent.append(text(whole));
    last = match.index + whole.length;
  }
  parent.append(text(source.slice(last)));
  return parent;
}

function el(name) {
  return document.createElement(name);
}

function text(value) {
  return document.createTextNode(value);
}

function wrap(name, value) {
  const node = el(name);
  node.append(text(value));
  return node;
}
