// The last conversations, kept in the browser (localStorage, for this server's address: a page of another
// origin cannot read them) until cleared: what their turns showed (questions, answers, sources, results,
// errors) and nothing else, never the token. Each tab shows one of them, named in its sessionStorage, so that
// a reload goes on with it while a new tab starts a new one; all tabs share the list.

const KEY = "mdrag-conversations";
const CURRENT = "mdrag-conversation"; // sessionStorage: the id of the tab's conversation
const MAX_CONVERSATIONS = 20; // the newest ones, by their last change
const MAX_TURNS = 50; // of one conversation, its newest turns
const MAX_CHARS = 500_000; // of one conversation, its newest turns within so many characters of JSON
const MAX_ALL_CHARS = 2_000_000; // of them all (the browser allows an origin about 5 MB)

const isTurn = (r) => typeof r?.question === "string" && (r.kind === "answer" || r.kind === "search");

/** The kept conversations, newest first: [{id, updated, turns}], each turn a record as the page made it. */
export function conversations() {
  let all;
  try {
    all = JSON.parse(localStorage.getItem(KEY) ?? "[]");
  } catch {
    all = [];
  }
  if (!Array.isArray(all)) return [];
  return all
    .filter((c) => typeof c?.id === "string" && Array.isArray(c.turns))
    .map((c) => ({ id: c.id, updated: Number(c.updated) || 0, turns: c.turns.filter(isTurn) }))
    .filter((c) => c.turns.length)
    .sort((a, b) => b.updated - a.updated);
}

/** One conversation's newest turns, as JSON texts, within MAX_TURNS and MAX_CHARS. */
function capped(turns) {
  const kept = turns.slice(-MAX_TURNS).map((r) => JSON.stringify(r));
  let chars = kept.reduce((n, s) => n + s.length + 1, 2);
  while (kept.length && chars > MAX_CHARS) chars -= kept.shift().length + 1;
  return kept;
}

function write(list) {
  localStorage.setItem(KEY, `[${list.join(",")}]`);
}

/**
 * Keep `conversation` ({id, updated, turns}) with the others: the newest MAX_CONVERSATIONS within
 * MAX_ALL_CHARS, this one always. One without turns is forgotten. False when the browser refused to keep it.
 */
export function keep(conversation) {
  const others = conversations().filter((c) => c.id !== conversation.id);
  const turns = capped(conversation.turns);
  const list = turns.length ? [`{"id":${JSON.stringify(conversation.id)},"updated":${conversation.updated},"turns":[${turns.join(",")}]}`] : [];
  let chars = list.reduce((n, s) => n + s.length, 2);
  for (const c of others) {
    if (list.length >= MAX_CONVERSATIONS) break;
    const text = JSON.stringify(c);
    if (chars + text.length + 1 > MAX_ALL_CHARS) break;
    chars += text.length + 1;
    list.push(text);
  }
  list.sort((a, b) => JSON.parse(b).updated - JSON.parse(a).updated);
  for (;;) {
    try {
      write(list);
      return true;
    } catch (e) {
      // over the browser's quota: the oldest others go first; this one alone too much, nothing is kept of it
      if (list.length <= 1) {
        forget(conversation.id);
        console.warn(`mdrag: the conversation is not kept in this browser: ${e}`);
        return false;
      }
      list.splice(list.findLastIndex((s) => !s.startsWith(`{"id":${JSON.stringify(conversation.id)},`)), 1);
    }
  }
}

/** Forget one conversation. */
export function forget(id) {
  try {
    write(conversations().filter((c) => c.id !== id).map((c) => JSON.stringify(c)));
  } catch {
    localStorage.removeItem(KEY);
  }
}

/** Forget them all. */
export function forgetAll() {
  localStorage.removeItem(KEY);
}

/** Whether a storage event says the kept conversations changed (in another tab). */
export const changedElsewhere = (ev) => ev.key === KEY || ev.key === null;

/** The id of this tab's conversation: the one it showed before a reload, or a new one. */
export function tabConversation() {
  return sessionStorage.getItem(CURRENT) || newConversationId();
}

/** A new id, now this tab's. */
export function newConversationId() {
  const id = `c${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`;
  return showing(id);
}

/** Make `id` this tab's conversation. */
export function showing(id) {
  sessionStorage.setItem(CURRENT, id);
  return id;
}

/** What the list shows for a conversation: its first question, cut. */
export function title(conversation) {
  const q = conversation.turns[0]?.question.trim().replace(/\s+/g, " ") ?? "";
  return Array.from(q).length > 80 ? `${Array.from(q).slice(0, 79).join("")}…` : q;
}
