// mdrag's page: a client of the `mdrag serve` WebSocket protocol (docs/protocol.md), nothing more.
// The server answers the requests of one connection one at a time, in order, so each request sent
// queues a handler, and every message goes to the oldest handler still waiting.
import { renderMarkdown } from "./markdown.js";
import { openButton, whereText } from "./viewer.js";

const $ = (id) => document.getElementById(id);
const form = $("ask");
const question = $("question");
const sendButton = $("send");
const stopButton = $("stop");
const newButton = $("new-conversation");
const searchOnly = $("search-only");
const log = $("log");
const stateLine = $("state");
const tokenForm = $("token-form");
const tokenInput = $("token");
const TOKEN = "mdrag-token"; // kept in sessionStorage: gone when the tab closes
// The conversation, kept in sessionStorage for the tab so that a reload shows it again: what the
// turns showed (questions, answers, sources, results, errors) and nothing else, its newest turns
// only (at most MAX_KEPT turns and MAX_KEPT_CHARS characters).
const CONVERSATION = "mdrag-conversation";
const MAX_KEPT = 50;
const MAX_KEPT_CHARS = 500_000;
// A question is sent with the earlier turns of the conversation (docs/protocol.md, "history"), so that
// a follow-up ("and how do I nest it?") is searched with them; the server keeps nothing. The bounds are
// the server's (mdrag/knobs.py): the newest turns, the beginning of each answer, so much in all.
const MAX_QUESTION_CHARS = 4000;
const MAX_HISTORY_TURNS = 6;
const MAX_HISTORY_ANSWER_CHARS = 1000;
const MAX_HISTORY_CHARS = 8000;

let ws = null; // the open connection, or null
let pending = []; // handlers of the requests sent, oldest first
let answering = null; // the handler of the question being answered
let state = ""; // the server's last state: loading | ready | empty
let poll = 0;
let turns = 0;
let conversation = []; // the records of the turns, oldest first (what is kept for a reload)
let saving = 0; // the timer of the next save, or 0
let pageHeight = 0; // the page's height when keepInView last looked

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function setState(name, text) {
  stateLine.dataset.state = name;
  stateLine.textContent = text;
}

// "indexing: 120 of 1089 files" while the server updates its index, or "" when it does not
function indexing(msg) {
  const p = msg.indexing;
  if (!p) return "";
  return p.files_total === null ? "indexing: scanning the folders" : `indexing: ${p.files_done} of ${p.files_total} files`;
}

function showStatus(msg) {
  state = msg.state;
  const doing = indexing(msg);
  if (msg.state === "ready") {
    const ready = `ready: ${msg.files} files, ${msg.chunks} chunks`;
    setState("ready", doing ? `${ready} (${doing})` : ready);
  } else if (msg.state === "loading") setState("loading", doing ? `loading the index: ${doing}…` : "loading the index…");
  else setState("empty", "empty: nothing is indexed (start the server with folders: mdrag serve DIR)");
  clearTimeout(poll);
  poll = setTimeout(pollStatus, state === "loading" || doing ? 1000 : 10000);
}

function pollStatus() {
  if (ws?.readyState !== WebSocket.OPEN) return;
  if (pending.length) poll = setTimeout(pollStatus, 1000);
  else send({ type: "status" }, statusHandler());
}

function statusHandler() {
  return {
    on(msg) {
      if (msg.type === "status") showStatus(msg);
      return msg.type === "status" || msg.type === "error";
    },
    fail() {},
  };
}

function send(msg, handler) {
  pending.push(handler);
  ws.send(JSON.stringify(msg));
}

function dispatch(msg) {
  if (pending.length && pending[0].on(msg)) pending.shift();
  updateControls();
}

function dropPending(reason) {
  const dropped = pending;
  pending = [];
  for (const h of dropped) h.fail(reason);
}

function updateControls() {
  const open = ws?.readyState === WebSocket.OPEN;
  sendButton.disabled = !open || answering !== null;
  newButton.disabled = answering !== null || !conversation.length;
  stopButton.hidden = answering === null;
  sendButton.textContent = searchOnly.checked ? "Search" : "Ask";
}

const tabToken = () => sessionStorage.getItem(TOKEN);

function connect() {
  const token = sessionStorage.getItem(TOKEN);
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const sock = new WebSocket(`${scheme}://${location.host}/${token ? `?token=${encodeURIComponent(token)}` : ""}`);
  let opened = false;
  ws = sock;
  pending = [statusHandler()]; // the server says its state first
  setState("connecting", "connecting…");
  sock.onopen = () => {
    opened = true;
    tokenForm.hidden = true;
    updateControls();
  };
  sock.onmessage = (ev) => {
    if (ws === sock) dispatch(JSON.parse(ev.data));
  };
  sock.onclose = () => {
    if (ws !== sock) return; // closed on purpose (Stop)
    ws = null;
    clearTimeout(poll);
    dropPending("the connection to the server was lost; ask again once it is back");
    updateControls();
    closed(opened, token);
  };
}

async function closed(opened, token) {
  // A browser does not tell why a handshake failed: when this page's server answers plain HTTP
  // but refused the WebSocket, it wants a token (or this address is not an allowed origin).
  let up = false;
  if (!opened) {
    try {
      up = (await fetch("/", { method: "HEAD", cache: "no-store" })).ok;
    } catch {
      up = false;
    }
  }
  if (up) {
    setState("token", token ? "the server refused the token: enter it again" : "this server needs its token (server.token)");
    tokenForm.hidden = false;
    tokenInput.focus();
  } else {
    setState("offline", "not connected: is `mdrag serve` running? retrying…");
    setTimeout(connect, 2000);
  }
}

// -- the conversation ----------------------------------------------------------
function newTurn(text, kind) {
  const id = `t${++turns}`;
  const article = el("article", `turn ${kind}`);
  article.id = id;
  const body = el("div", "body");
  article.append(el("p", "question", text), body);
  log.append(article);
  const record = { kind, question: text };
  conversation = [...conversation.slice(1 - MAX_KEPT), record];
  changed();
  keepInView(true); // a new turn is shown, wherever the reader had scrolled to
  return { id, article, body, question: text, record };
}

function end(turn) {
  turn.article.classList.remove("streaming");
  turn.article.dataset.done = ""; // the turn has its outcome: answer, error, or stop
  turn.record.done = true;
  changed();
  keepInView();
}

function note(turn, cls, text) {
  turn.article.querySelector(":scope > .note")?.remove();
  turn.article.append(el("p", `note ${cls}`, text));
  keepInView();
}

/** The answer ends without its sources: an error (cls "error") or a stop ("stopped"); its text so far stays. */
function cutShort(turn, cls, text) {
  turn.record.note = { cls, text };
  end(turn);
  note(turn, cls, text);
}

function showAnswer(turn, text) {
  turn.body.replaceChildren(renderMarkdown(text, { cite: cite(turn) }));
  turn.record.text = text;
  changed();
  keepInView();
}

/**
 * After the conversation grew: show the end of the page again (the newest turn, just above the input
 * box that sticks to the bottom of the window) if the reader was at its end before (or `always`). A
 * reader who scrolled up stays where they are until they scroll back down to the end.
 */
function keepInView(always = false) {
  const height = document.documentElement.scrollHeight;
  const slack = 24; // px short of the end that still count as the end
  if (always || window.scrollY + window.innerHeight >= pageHeight - slack) window.scrollTo(0, height);
  pageHeight = height;
}

// what is scrolled into view (a cited source) is kept clear of the input box
new ResizeObserver(() => {
  document.documentElement.style.scrollPaddingBottom = `${form.offsetHeight}px`;
}).observe(form);

// -- keeping the conversation for the tab ----------------------------------------
function changed() {
  if (!saving) saving = setTimeout(save, 500);
}

function save() {
  clearTimeout(saving);
  saving = 0;
  const kept = conversation.map((r) => JSON.stringify(r));
  let chars = kept.reduce((n, s) => n + s.length + 1, 2);
  while (kept.length && chars > MAX_KEPT_CHARS) chars -= kept.shift().length + 1;
  try {
    sessionStorage.setItem(CONVERSATION, `[${kept.join(",")}]`);
  } catch (e) {
    sessionStorage.removeItem(CONVERSATION); // over the browser's quota: nothing kept rather than a stale copy
    console.warn(`mdrag: the conversation is not kept for a reload: ${e}`);
  }
}

/** The turns kept by an earlier page of this tab, shown again as they were; one that was still
 * coming when the page went away is shown as stopped. */
function restore() {
  let records;
  try {
    records = JSON.parse(sessionStorage.getItem(CONVERSATION) ?? "[]");
  } catch {
    records = [];
  }
  if (!Array.isArray(records)) return;
  const reloaded = "Stopped: the page was reloaded before the answer was complete.";
  for (const r of records) {
    if (typeof r?.question !== "string" || (r.kind !== "answer" && r.kind !== "search")) continue;
    const turn = newTurn(r.question, r.kind);
    const said = ["error", "stopped"].includes(r.note?.cls) ? r.note : null;
    if (r.kind === "search") {
      if (Array.isArray(r.results)) showResults(turn, r.results);
      else if (said) showSearchNote(turn, said.cls, String(said.text));
      else showSearchNote(turn, "stopped", "Stopped: the page was reloaded before the results came.");
      continue;
    }
    const text = typeof r.text === "string" ? r.text : "";
    if (text) showAnswer(turn, text);
    if (said) cutShort(turn, said.cls, String(said.text));
    else if (r.done) finish(turn, text, Array.isArray(r.sources) ? r.sources.map(String) : [], Array.isArray(r.locations) ? r.locations : []);
    else cutShort(turn, "stopped", reloaded);
  }
}

// -- the history a question is sent with ------------------------------------------
/** `text` in at most `limit` characters (counted in code points as the server does, never halving one). */
function cut(text, limit) {
  const chars = Array.from(text);
  return chars.length <= limit ? text : `${chars.slice(0, limit - 1).join("").trimEnd()}…`;
}

/** The turns so far, as the query's "history": the newest, each answer's beginning, within the bounds. */
function history() {
  let turns = conversation
    .filter((r) => r.question.trim())
    .map((r) => ({ question: cut(r.question.trim(), MAX_QUESTION_CHARS), answer: r.done && !r.note && r.text ? cut(r.text.trim(), MAX_HISTORY_ANSWER_CHARS) : "" }))
    .slice(-MAX_HISTORY_TURNS);
  const size = (ts) => ts.reduce((n, t) => n + Array.from(t.question).length + Array.from(t.answer).length, 0);
  while (turns.length > 1 && size(turns) > MAX_HISTORY_CHARS) turns = turns.slice(1);
  if (turns.length && size(turns) > MAX_HISTORY_CHARS) turns = [{ question: turns[0].question, answer: "" }];
  return turns;
}

/** New conversation: the turns are cleared from the page and the tab, and the next question is asked alone. */
function newConversation() {
  if (answering) return;
  conversation = [];
  log.querySelectorAll(":scope > .turn").forEach((t) => t.remove());
  save();
  updateControls();
  question.focus();
}

function cite(turn) {
  return (n) => {
    const a = el("a", "cite", `[${n}]`);
    a.href = `#${turn.id}-src-${n}`;
    a.dataset.n = String(n);
    return a;
  };
}

function ask(text) {
  const earlier = history(); // the turns before this one
  const query = earlier.length ? { type: "query", question: text, history: earlier } : { type: "query", question: text };
  const turn = newTurn(text, "answer");
  const handler = {
    text: "",
    started: false,
    on(msg) {
      switch (msg.type) {
        case "stream_start":
          this.started = true;
          performance.mark(`mdrag:stream_start:${turn.id}`);
          turn.article.classList.add("streaming");
          return false;
        case "stream_chunk":
          this.text += msg.chunk;
          showAnswer(turn, this.text);
          if (!this.shown) performance.mark(`mdrag:first_text:${turn.id}`);
          this.shown = true;
          return false;
        case "stream_end":
        case "answer":
          answering = null;
          finish(turn, msg.type === "answer" ? msg.answer : this.text, msg.sources || [], msg.locations || []);
          return true;
        case "error": // before stream_start, or after it: the answer is cut short
          cutShort(turn, "error", `Error: ${msg.message}`);
          answering = null;
          return true;
        case "status": // not ready: the index is loading; ask again in a second
          showStatus(msg);
          note(turn, "wait", "The index is still loading; asking again shortly…");
          setTimeout(() => {
            if (answering === handler && ws?.readyState === WebSocket.OPEN) send(query, handler);
          }, 1000);
          return true;
        default:
          return false; // a message this page does not know: ignored
      }
    },
    fail(reason) {
      if (reason === "stopped") cutShort(turn, "stopped", "Stopped.");
      else cutShort(turn, "error", `Error: ${reason}`);
      if (answering === handler) answering = null;
    },
  };
  answering = handler;
  send(query, handler);
}

/** The complete answer: its text, its sources (the paths its [n] cite) and where in each it was found. */
function finish(turn, text, sources, locations) {
  turn.article.querySelector(":scope > .note")?.remove();
  showAnswer(turn, text);
  turn.record.sources = sources;
  turn.record.locations = locations;
  if (!sources.length) {
    turn.article.classList.add("no-info");
    turn.body.prepend(el("p", "label", "No relevant information"));
    end(turn);
    return;
  }
  // [n] is sources[n-1]; a path listed twice is shown once, under its first number
  const list = el("ol", "sources");
  const prefix = commonDir(sources);
  const first = new Map();
  sources.forEach((path, k) => {
    const n = k + 1;
    if (first.has(path)) {
      turn.body.querySelectorAll(`a.cite[data-n="${n}"]`).forEach((a) => {
        a.href = `#${turn.id}-src-${first.get(path)}`;
      });
      return;
    }
    first.set(path, n);
    list.append(sourceItem(turn, n, path, path.slice(prefix.length) || path, locations[k]));
  });
  turn.article.append(list);
  turn.body.addEventListener("click", (ev) => {
    const a = ev.target.closest("a.cite");
    const target = a && document.getElementById(a.hash.slice(1));
    if (!target) return;
    ev.preventDefault();
    const details = target.querySelector("details");
    details.open = true;
    target.scrollIntoView({ block: "nearest" });
  });
  end(turn);
}

function commonDir(paths) {
  if (paths.length < 2) return paths[0]?.slice(0, paths[0].lastIndexOf("/") + 1) ?? "";
  let prefix = paths[0].slice(0, paths[0].lastIndexOf("/") + 1);
  while (prefix && !paths.every((p) => p.startsWith(prefix))) prefix = prefix.slice(0, prefix.lastIndexOf("/", prefix.length - 2) + 1);
  return prefix;
}

/** Where to open a source or passage: its file by absolute path (unlike `ref`, never in two folders). */
function openAt(path, at) {
  const loc = { ref: path || at?.ref };
  for (const k of ["line_start", "line_end", "page"]) if (Number.isInteger(at?.[k]) && at[k] > 0) loc[k] = at[k];
  return loc;
}

function sourceItem(turn, n, path, label, at) {
  const li = el("li");
  li.id = `${turn.id}-src-${n}`;
  const details = el("details");
  const summary = el("summary");
  summary.append(el("span", "num", `[${n}]`), " ", el("span", "path", label), openButton(openAt(path, at), tabToken));
  summary.title = path;
  const box = el("div", "passages");
  details.append(summary, box);
  details.addEventListener("toggle", () => {
    if (details.open && !box.childElementCount) loadPassages(turn.question, path, box);
  });
  li.append(details);
  return li;
}

function loadPassages(query, path, box) {
  if (ws?.readyState !== WebSocket.OPEN) {
    box.append(el("p", "note error", "Not connected: close and open the source again once the page is connected."));
    return;
  }
  box.append(el("p", "note", "loading…"));
  const retry = (text) => box.replaceChildren(el("p", "note error", `${text} (close and open the source again)`));
  send(
    { type: "search", query, k: 3, threshold: 0, collapse: "none", filters: { path_prefix: path } },
    {
      on(msg) {
        if (msg.type === "search_results") {
          const own = msg.results.filter((r) => r.path === path);
          box.replaceChildren(...(own.length ? own.map(passage) : [el("p", "note", "This file has no passage any more (changed or removed).")]));
        } else if (msg.type === "error") retry(`Error: ${msg.message}`);
        else if (msg.type === "status") {
          showStatus(msg);
          retry("The index is loading");
        } else return false;
        return true;
      },
      fail: retry,
    },
  );
}

function passage(r) {
  const div = el("div", "passage");
  const where = whereText(r);
  const head = el("p", "where");
  head.append(el("span", "file", r.rel_path || r.path));
  if (r.heading) head.append(" › ", el("span", "heading", r.heading));
  if (where) head.append(" · ", el("span", "lines", where));
  if (typeof r.score === "number") head.append(" · ", el("span", "score", `score ${r.score.toFixed(2)}`));
  if (r.path || r.ref) head.append(openButton(openAt(r.path, r), tabToken));
  const text = el("div", "text");
  text.append(renderMarkdown(r.text));
  div.append(head, text);
  return div;
}

function showResults(turn, results) {
  // kept for a reload: what passage() shows
  const shown = ["path", "ref", "rel_path", "heading", "page", "line_start", "line_end", "score", "text"];
  turn.record.results = results.map((r) => Object.fromEntries(shown.map((k) => [k, r?.[k]])));
  if (!results.length) turn.body.replaceChildren(el("p", "label", "No relevant information: no passage matches."));
  else {
    const ol = el("ol", "results");
    turn.record.results.forEach((r) => ol.appendChild(el("li")).append(passage(r)));
    turn.body.replaceChildren(ol);
  }
  end(turn);
}

function showSearchNote(turn, cls, text) {
  turn.body.replaceChildren(el("p", `note ${cls}`, text));
  turn.record.note = { cls, text };
  end(turn);
}

function search(text) {
  const turn = newTurn(text, "search");
  turn.body.append(el("p", "note", "searching…"));
  send(
    { type: "search", query: text },
    {
      on(msg) {
        if (msg.type === "search_results") showResults(turn, msg.results);
        else if (msg.type === "error") showSearchNote(turn, "error", `Error: ${msg.message}`);
        else if (msg.type === "status") {
          showStatus(msg);
          showSearchNote(turn, "error", "The index is still loading: search again shortly.");
        } else return false;
        return true;
      },
      fail: (reason) => showSearchNote(turn, "error", `Error: ${reason}`),
    },
  );
}

// -- controls --------------------------------------------------------------------
form.addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = question.value.trim();
  if (!text || ws?.readyState !== WebSocket.OPEN || answering) return;
  question.value = "";
  if (searchOnly.checked) search(text);
  else ask(text);
  updateControls();
});

question.addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
    ev.preventDefault();
    form.requestSubmit();
  }
});

// Stop: closing the connection makes the server cancel the answer and its LLM request
// (docs/protocol.md); a new connection takes over at once.
stopButton.addEventListener("click", () => {
  if (!answering || !ws) return;
  const sock = ws;
  ws = null;
  sock.close();
  dropPending("stopped");
  answering = null;
  connect();
  updateControls();
});

searchOnly.addEventListener("change", updateControls);
newButton.addEventListener("click", newConversation);

tokenForm.addEventListener("submit", (ev) => {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN, tokenInput.value.trim());
  tokenInput.value = "";
  connect();
});

window.addEventListener("pagehide", save); // a reload or a closed tab: the latest turns, even one still coming
window.history.scrollRestoration = "manual"; // a reload shows the end of the conversation, as restore() scrolls there

restore();
connect();
updateControls();
question.focus();
