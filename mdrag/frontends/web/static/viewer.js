// Opening a source: the file itself, read from the server (GET /source, docs/protocol.md) and shown in a
// dialog with the cited lines (or page) marked and scrolled to. The text only ever becomes text nodes.
// The request carries the tab's token in a header (never in a URL that could be logged or shared), so
// the document is fetched here rather than followed as a link.

const viewer = document.getElementById("viewer");
const title = document.getElementById("viewer-title");
const content = document.getElementById("viewer-text");
document.getElementById("viewer-close").addEventListener("click", () => viewer.close());

const CONTEXT_ABOVE = 3; // lines shown above the cited ones

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

/** Where a location points, in words: "page 3", "lines 12–30", or "". */
export function whereText(loc) {
  if (loc.page) return `page ${loc.page}`;
  if (loc.line_start) return loc.line_end && loc.line_end !== loc.line_start ? `lines ${loc.line_start}–${loc.line_end}` : `line ${loc.line_start}`;
  return "";
}

/** A button that opens `loc` ({ref, line_start, line_end, page}); `token()` gives the tab's token. */
export function openButton(loc, token) {
  const b = el("button", "open", "open");
  b.type = "button";
  const where = whereText(loc);
  b.title = `Open ${loc.ref}${where ? ` at ${where}` : ""}`;
  b.addEventListener("click", (ev) => {
    ev.preventDefault(); // inside a <summary>: open the file, do not fold the passages
    ev.stopPropagation();
    openSource(loc, token());
  });
  return b;
}

/** A link to the web page a crawled document came from, for `url` (http/https only); null for anything else. */
export function pageLink(url) {
  if (typeof url !== "string" || !/^https?:\/\//i.test(url)) return null;
  const a = el("a", "open page", "page");
  a.href = url;
  a.target = "_blank";
  a.rel = "noopener noreferrer";
  a.title = `Open ${url}`;
  a.addEventListener("click", (ev) => ev.stopPropagation()); // inside a <summary>: do not fold the passages
  return a;
}

async function openSource(loc, token) {
  const params = new URLSearchParams({ ref: loc.ref });
  if (loc.page) params.set("page", String(loc.page));
  else if (loc.line_start) params.set("lines", `${loc.line_start}-${loc.line_end || loc.line_start}`);
  title.textContent = loc.ref;
  content.replaceChildren(el("p", "note", "loading…"));
  if (!viewer.open) viewer.showModal();
  let body;
  try {
    const res = await fetch(`/source?${params}`, { cache: "no-store", headers: token ? { Authorization: `Bearer ${token}` } : {} });
    body = await res.json();
    if (!res.ok) throw new Error(body?.error || `${res.status} ${res.statusText}`);
  } catch (e) {
    content.replaceChildren(el("p", "note error", `Cannot open ${loc.ref}: ${e.message}`));
    return;
  }
  show(body, loc);
}

function show({ document: doc, highlight, whole }, loc) {
  const lines = doc.text.split("\n");
  if (lines.length > 1 && lines[lines.length - 1] === "") lines.pop();
  const hit = highlight ? [highlight.line_start, highlight.line_end] : null;
  const where = hit && whereText(loc.page ? { page: loc.page } : { line_start: hit[0], line_end: hit[1] });
  title.replaceChildren(el("span", "file", doc.rel_path), where ? ` · ${where}` : "");
  title.title = doc.path;
  const notes = [];
  if (!whole) notes.push(el("p", "note", `Lines ${doc.line_start}–${doc.line_end} of ${doc.lines}: the whole document is too large to show.`));
  if (!doc.source_lines) notes.push(el("p", "note", "The text as mdrag reads it from the file (its lines are counted in this text)."));
  if (doc.changed) notes.push(el("p", "note", "The file changed since it was indexed: the cited lines may have moved (mdrag index updates the index)."));
  const box = el("div", "source-text");
  lines.forEach((text, i) => {
    const n = doc.line_start + i;
    const row = el("div", "line", text);
    row.dataset.n = String(n);
    if (hit && n >= hit[0] && n <= hit[1]) row.classList.add("hit");
    box.append(row);
  });
  content.replaceChildren(...notes, box);
  // the cited lines at the top of the view, a few lines of what comes before them above
  const first = hit ? Math.max(hit[0] - CONTEXT_ABOVE, doc.line_start) - doc.line_start : 0;
  box.children[first]?.scrollIntoView({ block: "start" });
}
