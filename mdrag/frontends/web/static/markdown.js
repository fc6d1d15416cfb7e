// A small Markdown renderer that builds DOM nodes and never parses HTML: text from documents and
// from the LLM only ever becomes text nodes, so a "<script>" or "<img onerror>" in it shows as text.
// It covers what answers use: headings, paragraphs, lists, block quotes, fenced code (with a copy button),
// rules, tables, and inline code, bold, italics, http(s) links and citations [n]. HTML comments from the
// documents (<!-- ... -->) are not shown, as a Markdown renderer would not; in code they are code.
import { copyButton } from "./copy.js";

const FENCE = /^\s{0,3}(`{3,}|~{3,})/;
const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^\s{0,3}([-*_])(\s*\1){2,}\s*$/;
const QUOTE = /^\s{0,3}>\s?/;
const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
const TABLE_RULE = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;
// code | link (balanced parentheses in its URL: wiki/Foo_(bar)) | **bold** | __bold__ | *em* | _em_ | [n] citation
// | <autolink>
const INLINE =
  /(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)|\[([^\]\n]+)\]\(\s*((?:[^\s()]|\([^\s()]*\))+)(?:\s+"[^"]*")?\s*\)|\*\*(\S[\s\S]*?)\*\*|__(\S[\s\S]*?)__|\*(\S[^*]*?)\*|(?<![\w])_(\S[^_]*?)_(?![\w])|\[(\d{1,3})\]|<(https?:\/\/[^>\s]+)>/g;

// a code span (kept), or a comment: to its "-->", or to the end of a text cut inside it
const CODE_OR_COMMENT = /(`+)(?:[^`]|[^`][\s\S]*?[^`])\1(?!`)|<!--[\s\S]*?(?:-->|$)/g;

/** The lines without their HTML comments, outside fenced code and code spans. */
function withoutComments(lines) {
  if (!lines.some((l) => l.includes("<!--"))) return lines;
  const out = [];
  let prose = [];
  let fence = "";
  const flush = () => {
    if (prose.length) out.push(...prose.join("\n").replace(CODE_OR_COMMENT, (m, ticks) => (ticks ? m : "")).split("\n"));
    prose = [];
  };
  for (const line of lines) {
    const m = fence ? null : FENCE.exec(line);
    if (fence) {
      out.push(line);
      if (line.trim().startsWith(fence)) fence = "";
    } else if (m) {
      flush();
      fence = m[1];
      out.push(line);
    } else prose.push(line);
  }
  flush();
  return out;
}

function node(tag, text) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  return e;
}

function link(href, label, options) {
  let url;
  try {
    url = new URL(href);
  } catch {
    return document.createTextNode(label === href ? href : `${label} (${href})`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") return document.createTextNode(label);
  const a = node("a");
  a.href = url.href;
  a.target = "_blank";
  a.rel = "noopener noreferrer";
  inline(label, a, options);
  return a;
}

/** Append the inline Markdown of `text` to `parent`. */
function inline(text, parent, options) {
  let last = 0;
  for (const m of text.matchAll(INLINE)) {
    if (m.index > last) parent.append(text.slice(last, m.index));
    last = m.index + m[0].length;
    if (m[1]) parent.append(node("code", m[2].replace(/^ (.*) $/s, "$1")));
    else if (m[3] !== undefined) parent.append(link(m[4], m[3], options));
    else if (m[5] !== undefined || m[6] !== undefined) inline(m[5] ?? m[6], parent.appendChild(node("strong")), options);
    else if (m[7] !== undefined || m[8] !== undefined) inline(m[7] ?? m[8], parent.appendChild(node("em")), options);
    else if (m[9] !== undefined) parent.append(options.cite ? options.cite(Number(m[9])) : m[0]);
    else parent.append(link(m[10], m[10], options));
  }
  if (last < text.length) parent.append(text.slice(last));
}

function paragraph(lines, parent, options) {
  const p = node("p");
  inline(lines.map((l) => l.trim()).join("\n"), p, options);
  parent.append(p);
}

function blocks(lines, parent, options) {
  let i = 0;
  let para = [];
  const flush = () => {
    if (para.length) paragraph(para, parent, options);
    para = [];
  };
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if (!line.trim()) {
      flush();
      i++;
    } else if ((m = FENCE.exec(line))) {
      flush();
      const fence = m[1];
      const code = [];
      for (i++; i < lines.length && !lines[i].trim().startsWith(fence); i++) code.push(lines[i]);
      i++; // the closing fence (an answer still streaming may not have it yet)
      const box = node("div");
      box.className = "code";
      const pre = box.appendChild(node("pre"));
      pre.append(node("code", code.join("\n")));
      box.append(copyButton("Copy the code", () => code.join("\n")));
      parent.append(box);
    } else if ((m = HEADING.exec(line))) {
      flush();
      const h = node(`h${Math.min(6, m[1].length + 2)}`);
      inline(m[2], h, options);
      parent.append(h);
      i++;
    } else if (line.includes("|") && TABLE_RULE.test(lines[i + 1] ?? "") && lines[i + 1].includes("-")) {
      flush();
      i = table(lines, i, parent, options);
    } else if (RULE.test(line)) {
      flush();
      parent.append(node("hr"));
      i++;
    } else if (QUOTE.test(line)) {
      flush();
      const quoted = [];
      for (; i < lines.length && QUOTE.test(lines[i]); i++) quoted.push(lines[i].replace(QUOTE, ""));
      const q = node("blockquote");
      blocks(quoted, q, options);
      parent.append(q);
    } else if ((m = ITEM.exec(line)) && (para.length === 0 || m[1].length === 0)) {
      flush();
      i = list(lines, i, parent, options);
    } else {
      para.push(line);
      i++;
    }
  }
  flush();
}

function cells(line) {
  return line.trim().replace(/^\|/, "").replace(/\|$/, "").split("|").map((c) => c.trim());
}

/** A table (a header row, a |---| rule, rows up to a blank line); wrapped so a wide one scrolls. */
function table(lines, start, parent, options) {
  const wrap = node("div");
  wrap.className = "table";
  const t = wrap.appendChild(node("table"));
  const head = t.appendChild(node("thead")).appendChild(node("tr"));
  for (const c of cells(lines[start])) inline(c, head.appendChild(node("th")), options);
  const body = t.appendChild(node("tbody"));
  let i = start + 2;
  for (; i < lines.length && lines[i].includes("|") && lines[i].trim(); i++) {
    const tr = body.appendChild(node("tr"));
    for (const c of cells(lines[i])) inline(c, tr.appendChild(node("td")), options);
  }
  parent.append(wrap);
  return i;
}

/** A list starting at lines[start]; items indented deeper than the first make a nested list. */
function list(lines, start, parent, options) {
  const first = ITEM.exec(lines[start]);
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const ol = node(ordered ? "ol" : "ul");
  if (ordered && parseInt(first[2], 10) !== 1) ol.start = parseInt(first[2], 10);
  let i = start;
  while (i < lines.length) {
    const m = ITEM.exec(lines[i]);
    if (!m || m[1].length !== indent || /\d/.test(m[2]) !== ordered) break;
    const item = [m[3]];
    for (i++; i < lines.length && lines[i].trim(); i++) {
      const next = ITEM.exec(lines[i]);
      if (next && next[1].length <= indent) break; // the next item, of this list or an outer one
      item.push(lines[i]); // a continuation line, or an item of a nested list
    }
    const li = node("li");
    const nested = item.findIndex((l, k) => k > 0 && ITEM.test(l));
    inline((nested < 0 ? item : item.slice(0, nested)).map((l) => l.trim()).join("\n"), li, options);
    if (nested >= 0) blocks(item.slice(nested), li, options);
    ol.append(li);
    if (!lines[i]?.trim() && ITEM.test(lines[i + 1] ?? "")) i++; // a blank line between items
  }
  parent.append(ol);
  return i;
}

/**
 * Render Markdown `text` as a DocumentFragment of safe DOM nodes.
 * `options.cite(n)` makes the node shown for a citation [n] (default: the text "[n]").
 */
export function renderMarkdown(text, options = {}) {
  const fragment = document.createDocumentFragment();
  blocks(withoutComments(String(text).replace(/\r\n?/g, "\n").split("\n")), fragment, options);
  return fragment;
}
