// mdrag's page: a client of the `mdrag serve` WebSocket protocol (docs/protocol.md), nothing more.
// Each request sent carries an id and a handler; every reply repeats its request's id and goes to that
// handler (an early "too many requests waiting" included), until the handler says it is done.
import { copyButton } from "./copy.js";
import { renderMarkdown } from "./markdown.js";
import * as saved from "./saved.js";
import { openButton, pageLink, whereText } from "./viewer.js";

const $ = (id) => document.getElementById(id);
const form = $("ask");
const question = $("question");
const sendButton = $("send");
const stopButton = $("stop");
const newButton = $("new-conversation");
const searchOnly = $("search-only");
const log = $("log");
const stateLine = $("state");
const unsent = $("unsent"); // why the question typed was not sent (not connected, an answer still coming)
const tokenForm = $("token-form");
const tokenInput = $("token");
const pastList = $("conversations");
const TOKEN = "mdrag-token"; // kept in sessionStorage: gone when the tab closes
// The conversations are kept in the browser (saved.js): this tab's, and the last others, listed.
const MAX_KEPT = 50; // turns of a conversation kept in memory
// A question is sent with the earlier turns of the conversation (docs/protocol.md, "history"), so that
// a follow-up ("and how do I nest it?") is searched with them; the server keeps nothing. The bounds are
// the server's (mdrag/knobs.py): the newest turns, the beginning of each answer, so much in all.
const MAX_QUESTION_CHARS = 4000;
const MAX_HISTORY_TURNS = 6;
const MAX_HISTORY_ANSWER_CHARS = 1000;
const MAX_HISTORY_CHARS = 8000;

let ws = null; // the open connection, or null
let pending = new Map(); // request id -> handler of the requests sent and not yet answered, oldest first
let requests = 0; // requests sent: the next one's id
let answering = null; // the handler of the question being answered
let state = ""; // the server's last state: loading | ready | empty
let poll = 0;
let everOpen = false; // a connection was open once: a later one is a reconnection
let turns = 0;
let conversationId = saved.tabConversation(); // this tab's conversation, kept under this id
let conversation = []; // the records of its turns, oldest first (what is kept)
let updated = 0; // when its turns last changed
let restoring = false; // turns are being shown again from what was kept: nothing changes
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
    // a first build that goes on: the server's line says that answers come from the files indexed so far
    setState("ready", msg.partial ? msg.message : doing ? `${ready} (${doing})` : ready);
  } else if (msg.state === "loading") setState("loading", doing ? `loading the index: ${doing}…` : "loading the index…");
  else setState("empty", "empty: nothing is indexed (start the server with folders: mdrag serve DIR)");
  clearTimeout(poll);
  poll = setTimeout(pollStatus, state === "loading" || doing ? 1000 : 10000);
}

function pollStatus() {
  if (ws?.readyState !== WebSocket.OPEN) return;
  if (pending.size) poll = setTimeout(pollStatus, 1000);
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
  const id = ++requests;
  pending.set(id, handler);
  ws.send(JSON.stringify({ ...msg, id }));
}

function dispatch(msg) {
  let id = msg.id;
  if (id === undefined) {
    // the server's state on connect answers no request; an error without id is about a message the
    // server could not read (none of this page's): the oldest request's
    if (msg.type === "status") showStatus(msg);
    id = msg.type === "error" ? pending.keys().next().value : undefined;
  }
  const handler = pending.get(id);
  if (handler?.on(msg)) pending.delete(id);
  updateControls();
}

function dropPending(reason) {
  const dropped = [...pending.values()];
  pending = new Map();
  for (const h of dropped) h.fail(reason);
}

function updateControls() {
  const open = ws?.readyState === WebSocket.OPEN;
  sendButton.disabled = !open || answering !== null;
  newButton.disabled = answering !== null || !conversation.length;
  stopButton.hidden = answering === null;
  sendButton.textContent = searchOnly.checked ? "Search" : "Ask";
  for (const b of log.querySelectorAll(".actions button.again")) b.disabled = !open || answering !== null;
  for (const b of pastList.querySelectorAll("button")) b.disabled = answering !== null;
  if (open && answering === null) unsent.hidden = true; // what kept the question back has passed
}

const tabToken = () => sessionStorage.getItem(TOKEN);

function connect() {
  const token = sessionStorage.getItem(TOKEN);
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const sock = new WebSocket(`${scheme}://${location.host}/${token ? `?token=${encodeURIComponent(token)}` : ""}`);
  let opened = false;
  ws = sock;
  pending = new Map();
  setState("connecting", "connecting…");
  sock.onopen = () => {
    opened = true;
    everOpen = true;
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
  // a citation [n] of a source the turn does not list (cut short before its sources, or a number past them)
  // links nowhere: plain text
  for (const a of turn.body.querySelectorAll("a.cite")) {
    if (!document.getElementById(a.hash.slice(1))) a.replaceWith(el("span", "cite dead", a.textContent));
  }
  actions(turn);
  changed();
  keepInView();
}

/** Below a turn that has its outcome: "Ask again" after an error or a stop, "Copy" for an answer's text. */
function actions(turn) {
  turn.article.querySelector(":scope > .actions")?.remove();
  const row = el("div", "actions");
  if (["error", "stopped"].includes(turn.record.note?.cls)) {
    const again = el("button", "again", turn.record.kind === "search" ? "Search again" : "Ask again");
    again.type = "button";
    again.title = "Ask this question again, in place of this turn";
    again.addEventListener("click", () => askAgain(turn));
    row.append(again);
  }
  if (turn.record.kind === "answer" && turn.record.text) row.append(copyButton("Copy the answer", () => copied(turn.record)));
  if (row.childElementCount) turn.article.append(row);
  updateControls();
}

/** An answer as it is copied: its Markdown, then its numbered sources (what its [n] cite). */
function copied(record) {
  const sources = (record.sources ?? []).map((path, k) => `[${k + 1}] ${path}`);
  return sources.length ? `${record.text.trim()}\n\nSources:\n${sources.join("\n")}\n` : `${record.text.trim()}\n`;
}

/** "Ask again": the turn goes (from the page and the kept conversation), and its question is asked anew. */
function askAgain(turn) {
  if (answering || ws?.readyState !== WebSocket.OPEN) return;
  turn.article.remove();
  conversation = conversation.filter((r) => r !== turn.record);
  changed();
  if (question.value.trim() === turn.question) question.value = "";
  if (turn.record.kind === "search") search(turn.question);
  else ask(turn.question);
  updateControls();
}

/** After an error, the question is in the box again (unless something else was typed there meanwhile). */
function keepQuestion(turn) {
  if (!question.value.trim()) question.value = turn.question;
}

function note(turn, cls, text) {
  turn.article.querySelector(":scope > .note")?.remove();
  turn.body.after(el("p", `note ${cls}`, text));
  keepInView();
}

/**
 * The answer ends before it is whole: an error (cls "error") or a stop ("stopped"); its text so far stays,
 * and the sources the server found for it (an LLM error says them) are listed.
 */
function cutShort(turn, cls, text, sources = [], locations = []) {
  turn.record.note = { cls, text };
  note(turn, cls, text);
  if (sources.length) {
    turn.record.sources = sources;
    turn.record.locations = locations;
    turn.article.append(el("p", "found", "The passages found for this question:"));
    listSources(turn, sources, locations);
  }
  end(turn);
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

// what is scrolled into view (a cited source) is kept clear of the input box and of the header (sticky:
// the server's state stays in view)
const header = document.querySelector("header");
const clear = new ResizeObserver(() => {
  document.documentElement.style.scrollPaddingBottom = `${form.offsetHeight}px`;
  document.documentElement.style.scrollPaddingTop = `${header.offsetHeight}px`;
});
clear.observe(form);
clear.observe(header);

// -- keeping the conversations ----------------------------------------------------
function changed() {
  if (restoring) return;
  updated = Date.now();
  if (!saving) saving = setTimeout(save, 500);
}

function save() {
  clearTimeout(saving);
  saving = 0;
  if (updated) saved.keep({ id: conversationId, updated, turns: conversation });
  listConversations();
}

const strings = (v) => (Array.isArray(v) ? v.map(String) : []);

/** Show kept turns again as they were; one that was still coming when its page went away is shown as stopped. */
function show(records) {
  restoring = true;
  const reloaded = "Stopped: the page was reloaded before the answer was complete.";
  try {
    for (const r of records) {
      const turn = newTurn(r.question, r.kind);
      const said = ["error", "stopped"].includes(r.note?.cls) ? r.note : null;
      if (r.kind === "search") {
        if (Array.isArray(r.results)) showResults(turn, r.results, r.none);
        else if (said) showSearchNote(turn, said.cls, String(said.text));
        else showSearchNote(turn, "stopped", "Stopped: the page was reloaded before the results came.");
        continue;
      }
      const text = typeof r.text === "string" ? r.text : "";
      const locations = Array.isArray(r.locations) ? r.locations : [];
      if (text) showAnswer(turn, text);
      if (said) cutShort(turn, said.cls, String(said.text), strings(r.sources), locations);
      else if (r.done) finish(turn, text, strings(r.sources), locations);
      else cutShort(turn, "stopped", reloaded);
    }
  } finally {
    restoring = false;
  }
}

/** Show the kept conversation `id` in place of this tab's (none kept under it: a new, empty one). */
function openConversation(id) {
  if (answering) return;
  if (saving) save();
  const found = saved.conversations().find((c) => c.id === id);
  conversationId = saved.showing(id);
  conversation = [];
  updated = found?.updated ?? 0;
  log.querySelectorAll(":scope > .turn").forEach((t) => t.remove());
  if (found) show(found.turns);
  listConversations();
  updateControls();
  keepInView(true);
}

/** The list of kept conversations, newest first, this tab's marked; each opens, or is forgotten. */
function listConversations() {
  const all = saved.conversations();
  const list = pastList.querySelector("ol");
  pastList.hidden = !all.length;
  pastList.querySelector("summary").textContent = `Conversations (${all.length})`;
  list.replaceChildren(
    ...all.map((c) => {
      const li = el("li");
      const open = el("button", "open-conversation", saved.title(c));
      open.type = "button";
      open.title = `${c.turns.length} ${c.turns.length === 1 ? "question" : "questions"}, ${new Date(c.updated).toLocaleString()}`;
      open.addEventListener("click", () => {
        pastList.open = false;
        openConversation(c.id);
      });
      if (c.id === conversationId) li.setAttribute("aria-current", "true");
      const drop = el("button", "forget", "×");
      drop.type = "button";
      drop.title = "Forget this conversation";
      drop.setAttribute("aria-label", `Forget the conversation "${saved.title(c)}"`);
      drop.addEventListener("click", () => {
        saved.forget(c.id);
        if (c.id === conversationId) newConversation();
        listConversations();
      });
      li.append(open, drop);
      return li;
    }),
  );
  updateControls();
}

/** Another tab changed the kept conversations: list them again; this tab's forgotten there, start anew. */
function keptElsewhere() {
  if (conversation.length && !answering && !saving && !saved.conversations().some((c) => c.id === conversationId)) newConversation();
  listConversations();
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

/** New conversation: the page starts an empty one (the last stays in the list); the next question is asked alone. */
function newConversation() {
  if (answering) return;
  if (saving) save();
  openConversation(saved.newConversationId());
  question.focus();
}

/** Forget every kept conversation (after asking), this tab's too. */
function forgetAll() {
  if (answering || !window.confirm("Forget all the conversations kept in this browser?")) return;
  clearTimeout(saving);
  saving = 0;
  saved.forgetAll();
  newConversation();
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
          partialNote(turn, msg);
          return true;
        case "error": // before stream_start, or after it: the answer is cut short (with the sources found)
          answering = null;
          cutShort(turn, "error", `Error: ${msg.message}`, strings(msg.sources), Array.isArray(msg.locations) ? msg.locations : []);
          keepQuestion(turn);
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
      if (answering === handler) answering = null;
      if (reason === "stopped") cutShort(turn, "stopped", "Stopped.");
      else {
        cutShort(turn, "error", `Error: ${reason}`);
        keepQuestion(turn);
      }
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
  listSources(turn, sources, locations);
  end(turn);
}

/** The numbered sources below a turn's answer, each opening to its passages; its [n] link to them. */
function listSources(turn, sources, locations) {
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
  const link = pageLink(at?.url);
  if (link) summary.append(" ", link);
  if (Array.isArray(at?.copies) && at.copies.length) summary.append(el("span", "copies", ` (the same as ${at.copies.join(", ")})`));
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
  const link = pageLink(r.url);
  if (link) head.append(" ", link);
  if (Array.isArray(r.copies) && r.copies.length) head.append(el("span", "copies", ` (the same as ${r.copies.map((c) => c?.ref ?? "").join(", ")})`));
  const text = el("div", "text");
  text.append(renderMarkdown(r.text));
  div.append(head, text);
  return div;
}

function showResults(turn, results, note) {
  // kept for a reload: what passage() shows; score: what ordered the list (the server's result_fields)
  const shown = ["path", "ref", "rel_path", "heading", "page", "line_start", "line_end", "score", "text", "url", "copies"];
  turn.record.results = results.map((r) => Object.fromEntries(shown.map((k) => [k, r?.[k]])));
  if (typeof note === "string") turn.record.none = note; // the server's words for no results
  if (!results.length) turn.body.replaceChildren(el("p", "label", turn.record.none ?? "No relevant information: no passage matches."));
  else {
    const ol = el("ol", "results");
    turn.record.results.forEach((r) => ol.appendChild(el("li")).append(passage(r)));
    turn.body.replaceChildren(ol);
  }
  end(turn);
}

/** An answer or results made from part of the files (the index's first build goes on): the server's line. */
function partialNote(turn, msg) {
  if (!msg.partial?.message) return;
  turn.record.note = { cls: "wait", text: msg.partial.message };
  note(turn, "wait", msg.partial.message);
  changed(); // kept with the conversation
}

function showSearchNote(turn, cls, text) {
  turn.body.replaceChildren(el("p", `note ${cls}`, text));
  turn.record.note = { cls, text };
  end(turn);
  if (cls === "error" && !restoring) keepQuestion(turn);
}

function search(text) {
  const turn = newTurn(text, "search");
  turn.body.append(el("p", "note", "searching…"));
  send(
    { type: "search", query: text },
    {
      on(msg) {
        if (msg.type === "search_results") {
          showResults(turn, msg.results, msg.note);
          partialNote(turn, msg);
        } else if (msg.type === "error") showSearchNote(turn, "error", `Error: ${msg.message}`);
        else if (msg.type === "status") {
          showStatus(msg);
          showSearchNote(turn, "error", "The index is still loading: search again shortly.");
        } else return false;
        return true;
      },
      fail: (reason) => showSearchNote(turn, reason === "stopped" ? "stopped" : "error", reason === "stopped" ? "Stopped." : `Error: ${reason}`),
    },
  );
}

// -- controls --------------------------------------------------------------------
// Why a question cannot be sent now ("" when it can): said under the box, the question left in it.
function notSendable() {
  if (answering) return "not sent: an answer is still coming (Stop ends it); your question was kept";
  if (ws?.readyState === WebSocket.OPEN) return "";
  if (stateLine.dataset.state === "token") return "not sent: this server needs its token (above); your question was kept";
  return `not connected: ${everOpen ? "reconnecting" : "connecting"}…; your question was kept`;
}

form.addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = question.value.trim();
  if (!text) return;
  const why = notSendable();
  unsent.textContent = why;
  unsent.hidden = !why;
  if (why) return;
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
$("forget-all").addEventListener("click", forgetAll);
window.addEventListener("storage", (ev) => {
  if (saved.changedElsewhere(ev)) keptElsewhere();
});

tokenForm.addEventListener("submit", (ev) => {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN, tokenInput.value.trim());
  tokenInput.value = "";
  connect();
});

window.addEventListener("pagehide", () => saving && save()); // a reload or a closed tab: the latest turns, even one still coming
window.history.scrollRestoration = "manual"; // a reload shows the end of the conversation, as openConversation() scrolls there

openConversation(conversationId);
connect();
updateControls();
question.focus();
