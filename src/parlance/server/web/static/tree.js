// A conversation as the page keeps it: its messages form a tree (each names its
// parent), so editing a message or regenerating an answer adds a sibling instead of
// losing what was there, and `current` names the leaf of the branch on screen.

export function newId(prefix = "m") {
  const bytes = crypto.getRandomValues(new Uint8Array(8));
  return prefix + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** An empty conversation with the page's settings of the moment. */
export function newConversation(settings) {
  return { id: null, title: "", created_at: null, settings: { ...settings }, messages: [],
    current: null };
}

export function byId(doc, id) {
  return doc.messages.find((m) => m.id === id) || null;
}

export function children(doc, parentId) {
  return doc.messages.filter((m) => (m.parent ?? null) === (parentId ?? null));
}

/** The messages from the root to `leafId` (the branch on screen), in order. */
export function branch(doc, leafId = doc.current) {
  const path = [];
  for (let m = leafId && byId(doc, leafId); m; m = m.parent ? byId(doc, m.parent) : null) {
    path.push(m);
  }
  return path.reverse();
}

/** The newest leaf under `id`: where a branch picked by its first message goes on. */
export function newestLeaf(doc, id) {
  let message = byId(doc, id);
  for (;;) {
    const below = children(doc, message.id);
    if (!below.length) return message.id;
    message = below[below.length - 1];
  }
}

/** Adds `message` (its parent already in the tree) and makes it the current leaf. */
export function add(doc, message) {
  doc.messages.push(message);
  doc.current = message.id;
  return message;
}

/** [index, count] of a message among its siblings (1-based index). */
export function place(doc, message) {
  const siblings = children(doc, message.parent);
  return [siblings.indexOf(message) + 1, siblings.length];
}

/** The sibling `step` places away from `message` (wrapping), or null if it has none. */
export function sibling(doc, message, step) {
  const siblings = children(doc, message.parent);
  if (siblings.length < 2) return null;
  const at = siblings.indexOf(message);
  return siblings[(at + step + siblings.length) % siblings.length];
}

/** The text a person sent, with the files attached to it. */
export function sentText(message) {
  const files = (message.attachments || []).map(
    (file) => `\n\n<file name="${file.name}">\n${file.text}\n</file>`);
  return message.text + files.join("");
}

/** The Responses API input for `path`: user and assistant messages in order; a
 * compaction stands in for everything before it. */
export function inputItems(path) {
  let start = 0;
  path.forEach((m, i) => { if (m.compaction) start = i; });
  const items = [];
  path.slice(start).forEach((m) => {
    if (m.compaction) items.push(...m.compaction);
    if (m.role === "user") {
      items.push({ type: "message", role: "user",
        content: [{ type: "input_text", text: sentText(m) }] });
    } else if (m.role === "assistant" && m.text) {
      items.push({ type: "message", role: "assistant",
        content: [{ type: "output_text", text: m.text }] });
    }
  });
  return items;
}
