// The conversation list, kept by the server (`/parlance/conversations`) so every
// browser pointed at it sees the same: listed and searched there, opened, renamed,
// deleted (after a confirmation), exported to a JSON file and imported from one.

import { api, json, sendJSON } from "./api.js";

const PATH = "/parlance/conversations";

export async function listConversations(query = "") {
  const params = new URLSearchParams({ limit: "200" });
  if (query) params.set("q", query);
  return (await json(`${PATH}?${params}`)).data;
}

export async function loadConversation(id) {
  return json(`${PATH}/${encodeURIComponent(id)}`);
}

/** Keeps `doc` (giving it an id on its first save); resolves with its summary. */
export async function saveConversation(doc) {
  const body = { ...doc };
  if (!doc.id) {
    const summary = await (await sendJSON("POST", PATH, body)).json();
    doc.id = summary.id;
    doc.created_at = summary.created_at;
    return summary;
  }
  return (await sendJSON("PUT", `${PATH}/${encodeURIComponent(doc.id)}`, body)).json();
}

export async function renameConversation(id, title) {
  return (await sendJSON("PATCH", `${PATH}/${encodeURIComponent(id)}`, { title })).json();
}

export async function deleteConversation(id) {
  await api(`${PATH}/${encodeURIComponent(id)}`, { method: "DELETE" });
}

/** Downloads every conversation (or the one given) as a JSON file. */
export async function exportConversations(ids) {
  const conversations = await Promise.all(ids.map(loadConversation));
  const blob = new Blob([JSON.stringify({ conversations }, null, 2)],
    { type: "application/json" });
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = `parlance-conversations-${new Date().toISOString().slice(0, 10)}.json`;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 1000);
}

/** Imports the conversations of an exported file (one document or {conversations}). */
export async function importConversations(file) {
  const parsed = JSON.parse(await file.text());
  const conversations = Array.isArray(parsed.conversations) ? parsed.conversations : [parsed];
  return (await sendJSON("POST", PATH, { conversations })).json();
}

/** Draws the list; `handlers`: {open(id), rename(summary), remove(summary)}. */
export function renderList(list, summaries, current, handlers) {
  list.replaceChildren(...summaries.map((c) => {
    const item = document.createElement("li");
    if (c.id === current) item.className = "current";
    const open = document.createElement("button");
    open.type = "button";
    open.className = "open";
    open.textContent = c.title || "(untitled)";
    open.title = `${c.title || "(untitled)"} · ${new Date(c.updated_at * 1000).toLocaleString()}`;
    if (c.id === current) open.setAttribute("aria-current", "true");
    open.addEventListener("click", () => handlers.open(c.id));
    const rename = document.createElement("button");
    rename.type = "button";
    rename.className = "rename";
    rename.textContent = "✎";
    rename.setAttribute("aria-label", `Rename “${c.title || "untitled"}”`);
    rename.addEventListener("click", () => handlers.rename(c));
    const remove = document.createElement("button");
    remove.type = "button";
    remove.className = "forget";
    remove.textContent = "×";
    remove.setAttribute("aria-label", `Delete “${c.title || "untitled"}”`);
    remove.addEventListener("click", () => handlers.remove(c));
    item.append(open, rename, remove);
    return item;
  }));
}
