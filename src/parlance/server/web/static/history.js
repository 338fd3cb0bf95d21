// Conversations. The server keeps each one (a chain of stored responses linked by
// `previous_response_id`) but lists none, so this browser keeps the list of
// conversation heads (the last response id of each) and loads their content from the
// server: `GET /v1/responses/{id}/input_items` (everything before the last answer) and
// `GET /v1/responses/{id}` (the last answer).

import { json } from "./api.js";
import { AnswerView, showUserMessage } from "./answer.js";

const KEY = "parlance.conversations";
const LIMIT = 50;

/** [{id, head, title, model, updated}], the most recent first. */
export function conversations() {
  try {
    return JSON.parse(localStorage.getItem(KEY)) || [];
  } catch {
    return [];
  }
}

/** Records that conversation `id` now ends with response `head`. */
export function remember(id, head, title, model) {
  const others = conversations().filter((c) => c.id !== id);
  const entry = { id, head, title: title.slice(0, 80), model, updated: Date.now() };
  localStorage.setItem(KEY, JSON.stringify([entry, ...others].slice(0, LIMIT)));
}

export function forget(id) {
  localStorage.setItem(KEY, JSON.stringify(conversations().filter((c) => c.id !== id)));
}

export function renderList(list, current, onOpen, onForget) {
  list.replaceChildren(...conversations().map((c) => {
    const item = document.createElement("li");
    if (c.id === current) item.className = "current";
    const open = document.createElement("button");
    open.type = "button";
    open.className = "open";
    open.textContent = c.title || "(untitled)";
    open.title = `${c.model} · ${new Date(c.updated).toLocaleString()}`;
    open.addEventListener("click", () => onOpen(c));
    const remove = document.createElement("button");
    remove.type = "button";
    remove.className = "forget";
    remove.textContent = "×";
    remove.title = "Remove from this list";
    remove.addEventListener("click", () => onForget(c));
    item.append(open, remove);
    return item;
  }));
}

/** Draws a stored conversation from the server. */
export async function showConversation(head) {
  const items = [];
  let after = null;
  for (;;) {
    const query = new URLSearchParams({ order: "asc", limit: "100" });
    if (after) query.set("after", after);
    const page = await json(`/v1/responses/${encodeURIComponent(head)}/input_items?${query}`);
    items.push(...page.data);
    if (!page.has_more) break;
    after = page.last_id;
  }
  const last = await json(`/v1/responses/${encodeURIComponent(head)}`);
  let view = null;
  const answer = () => view || (view = new AnswerView(last.model));
  const close = () => { if (view) view.done({ ttft: null, tokens: null, seconds: 0 }); view = null; };
  [...items, ...last.output].forEach((item, index) => {
    if (item.type === "message" && item.role === "user") {
      close();
      showUserMessage(textOf(item.content));
    } else if (item.type === "message" && item.role === "assistant") {
      answer().addText(index, textOf(item.content));
    } else if (item.type === "reasoning") {
      answer().addReasoning(index, textOf(item.content || []));
      view.endReasoning(index);
    } else if (item.type === "function_call" || item.type === "mcp_call") {
      answer().finishToolCall(index, item);
    } else if (item.type === "function_call_output" && view) {
      view.note(`Result of ${item.call_id}: ${item.output}`);
    }
  });
  close();
  return last;
}

function textOf(content) {
  if (typeof content === "string") return content;
  return content.map((part) => part.text || "").join("");
}
