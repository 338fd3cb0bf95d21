// The page's wiring: the conversation on screen (a tree of messages, kept by the
// server after every turn, stopped and failed ones included), the composer with its
// attachments, Send / Stop / Esc, the message actions (copy, edit, regenerate,
// continue, versions), the model picker with load / eject / context length and
// downloads, the conversation list, the connection and the status panel.

import { AnswerView, actionBar, storedAnswerNode, userNode } from "./answer.js";
import { ApiError, Unreachable, connection, postJSON } from "./api.js";
import { readAttachment } from "./attachments.js";
import {
  deleteConversation, exportConversations, importConversations, listConversations,
  loadConversation, renameConversation, renderList, saveConversation,
} from "./conversations.js";
import {
  describeModel, download, ejectModel, fillPicker, listModels, loadModel,
} from "./models.js";
import { Follower } from "./scroll.js";
import { refreshStatus } from "./status.js";
import {
  add, branch, byId, inputItems, newConversation, newId, newestLeaf, place, sentText, sibling,
} from "./tree.js";
import { continueTurn, runTurn, turnBody } from "./turn.js";

const $ = (id) => document.getElementById(id);
const SETTINGS = "parlance.settings";
const STATUS_EVERY_MS = 3000;
const RETRY_EVERY_MS = 2000;
const TITLE_CHARS = 80;

const state = {
  doc: null, controller: null, models: [], summaries: [], attached: [], follower: null,
  reading: [], // names of files still being read (a PDF takes a moment)
  view: null, // the answer being streamed
};

// -- settings -------------------------------------------------------------------------

function readSettings() {
  const number = (input) => (input.value === "" ? null : Number(input.value));
  return {
    model: $("model").value,
    system: $("system").value.trim(),
    temperature: number($("temperature")),
    topP: number($("top-p")),
    maxTokens: number($("max-tokens")),
    contextPolicy: $("context-policy").value,
    mcp: $("mcp").value.split(",").map((s) => s.trim()).filter(Boolean),
  };
}

function showSettings(saved) {
  $("system").value = saved.system || "";
  $("temperature").value = saved.temperature ?? "";
  $("top-p").value = saved.topP ?? "";
  $("max-tokens").value = saved.maxTokens ?? "";
  $("context-policy").value = saved.contextPolicy || "rolling";
  $("mcp").value = (saved.mcp || []).join(", ");
}

function saveSettings() {
  const settings = readSettings();
  localStorage.setItem(SETTINGS, JSON.stringify(settings));
  if (state.doc) state.doc.settings = settings; // settings belong to the conversation
  showModelState();
}

// -- small pieces of the page ------------------------------------------------------

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = !message;
}

function announce(text) {
  $("announce").textContent = text;
}

function setBusy(busy) {
  document.body.dataset.state = busy ? "streaming" : "idle";
  $("send").disabled = busy;
  $("stop").disabled = !busy;
  for (const node of document.querySelectorAll("#messages .actions button")) {
    node.disabled = busy;
  }
}

function modelOf(id) {
  return state.models.find((m) => m.id === id) || null;
}

function showModelState() {
  const model = modelOf($("model").value);
  $("model-state").textContent = describeModel(model);
  $("eject-model").disabled = !model || !model.loaded || !model.instance;
  if (model && model.maxContext) $("context-length").max = String(model.maxContext);
}

function showContext(usage) {
  const model = modelOf($("model").value);
  if (!usage) { $("context-meter").textContent = ""; return; }
  const used = (usage.input_tokens || 0) + (usage.output_tokens || 0);
  const of = model && model.context ? ` of ${model.context.toLocaleString()}` : "";
  $("context-meter").textContent = `Context: ${used.toLocaleString()}${of} tokens`;
}

async function refreshModels(wanted) {
  state.models = await listModels();
  fillPicker($("model"), state.models, wanted);
  showModelState();
}

// -- the conversation on screen -----------------------------------------------------

function showBranch() {
  const list = $("messages");
  const path = state.doc ? branch(state.doc) : [];
  list.replaceChildren(...path.map((message) => messageNode(message)));
  state.follower.resume();
}

function messageNode(message) {
  const node = message.role === "user" ? userNode(message) : storedAnswerNode(message);
  node.append(actionBar(actionsOf(message)));
  return node;
}

function actionsOf(message) {
  const doc = state.doc;
  const actions = {
    place: place(doc, message),
    previous: () => goToSibling(message, -1),
    next: () => goToSibling(message, 1),
    copy: () => (message.role === "user" ? sentText(message) : message.text || ""),
  };
  if (message.role === "user") actions.edit = () => startEdit(message);
  else {
    actions.regenerate = () => regenerate(message);
    if (message.status && message.status !== "completed" && message.text) {
      actions.continue = () => continueAnswer(message);
    }
  }
  return actions;
}

function goToSibling(message, step) {
  if (state.controller) return;
  const other = sibling(state.doc, message, step);
  if (!other) return;
  state.doc.current = newestLeaf(state.doc, other.id);
  showBranch();
  keep().catch(() => {});
}

function startEdit(message) {
  if (state.controller) return;
  const node = document.querySelector(`.message[data-id="${message.id}"]`);
  const editor = document.createElement("form");
  editor.className = "editor";
  const area = document.createElement("textarea");
  area.value = message.text;
  area.rows = Math.min(12, message.text.split("\n").length + 1);
  area.setAttribute("aria-label", "Edit the message");
  const save = document.createElement("button");
  save.type = "submit";
  save.textContent = "Send";
  const cancel = document.createElement("button");
  cancel.type = "button";
  cancel.textContent = "Cancel";
  cancel.addEventListener("click", () => showBranch());
  editor.append(area, save, cancel);
  editor.addEventListener("submit", (event) => {
    event.preventDefault();
    const text = area.value.trim();
    if (!text) return;
    const edited = add(state.doc, { id: newId(), parent: message.parent, role: "user", text,
      attachments: message.attachments || [] });
    showBranch();
    answer(edited).catch((error) => showError(error.message));
  });
  node.replaceWith(editor);
  area.focus();
}

function regenerate(message) {
  if (state.controller) return;
  const user = byId(state.doc, message.parent);
  state.doc.current = user.id;
  showBranch();
  answer(user).catch((error) => showError(error.message));
}

// -- turns --------------------------------------------------------------------------

async function send(event) {
  event.preventDefault();
  const text = $("prompt").value.trim();
  const settings = readSettings();
  if (!text || !settings.model || state.controller) return;
  if (state.reading.length) {
    showError(`Still reading ${state.reading.join(", ")}: send once it is attached.`);
    return;
  }
  saveSettings();
  if (!state.doc) state.doc = newConversation(settings);
  state.doc.settings = settings;
  const user = add(state.doc, { id: newId(), parent: state.doc.current, role: "user", text,
    attachments: state.attached });
  if (!state.doc.title) state.doc.title = text.slice(0, TITLE_CHARS);
  $("prompt").value = "";
  state.attached = [];
  showAttached();
  const list = $("messages");
  list.append(messageNode(user));
  state.follower.resume();
  await answer(user);
}

/** Answers `user` (the current leaf): a new answer under it, kept whatever happens. */
async function answer(user) {
  const settings = state.doc.settings = readSettings();
  showError("");
  setBusy(true);
  state.controller = new AbortController();
  const record = add(state.doc, { id: newId(), parent: user.id, role: "assistant",
    model: settings.model, text: "", status: "stopped" });
  try {
    await ensureModel(settings.model, state.controller.signal);
    if (state.controller.signal.aborted) return;
    const result = await withContextPolicy(user, record, settings);
    showContext(result && result.usage);
    announce(`Answer ${record.status}.`);
  } catch (error) {
    record.status = "failed";
    record.error = error.message;
    showError(error instanceof ApiError || error instanceof Unreachable ? error.message
      : `The answer failed: ${error.message}`);
  } finally {
    state.controller = null;
    await keep().catch((error) => showError(`The conversation could not be kept: ${error.message}`));
    finishAnswer(record);
    setBusy(false);
    refreshModels(settings.model).catch(() => {});
    refreshStatus($("status-body")).catch(() => {});
  }
}

/** The streamed answer stays as drawn (drawing a long one again would stall the page):
 * it gets its actions; anything else (an answer refused before it began) is redrawn. */
function finishAnswer(record) {
  const view = state.view;
  state.view = null;
  if (view && view.record === record && view.node.isConnected) {
    if (record.note) view.note(record.note);
    view.node.append(actionBar(actionsOf(record)));
  } else {
    showBranch();
  }
}

/** Runs the turn; a context that is too small is met by the conversation's policy. */
async function withContextPolicy(user, record, settings) {
  let path = branch(state.doc, user.id);
  let dropped = 0;
  for (;;) {
    const items = inputItems(path);
    const view = state.view = new AnswerView($("messages"), record, state.follower);
    try {
      return await runTurn(turnBody(settings, items), view, state.controller.signal);
    } catch (error) {
      if (!(error instanceof ApiError) || !overflowed(error)) throw error;
      if (settings.contextPolicy === "middle" && path.length > 3) {
        path = [...path.slice(0, 2), ...path.slice(4)]; // drop the turn after the first
        dropped += 1;
        record.note = `${dropped} older turn(s) left out to fit the context.`;
        continue;
      }
      if (settings.contextPolicy === "compact" && !user.compaction && path.length > 1) {
        user.compaction = await compact(settings, inputItems(path.slice(0, -1)));
        path = [user];
        continue;
      }
      throw new ApiError(error.status, `${error.message} (the context is full: choose `
        + "another \"When the context is full\" setting, start a new chat, or load the "
        + "model with a longer context)", error.code);
    }
  }
}

function overflowed(error) {
  return error.code === "context_length_exceeded" || /context/i.test(error.message || "");
}

/** The older turns summarised by the server (`/v1/responses/compact`): its compaction
 * item stands in for them from then on. */
async function compact(settings, items) {
  announce("Summarising the older turns to fit the context…");
  const body = { model: settings.model, input: items };
  const response = await (await postJSON("/v1/responses/compact", body,
    state.controller.signal)).json();
  return response.output.filter((item) => item.type === "compaction");
}

async function continueAnswer(message) {
  if (state.controller) return;
  const settings = readSettings();
  setBusy(true);
  state.controller = new AbortController();
  const node = document.querySelector(`.message[data-id="${message.id}"]`);
  const messages = [];
  if (settings.system) messages.push({ role: "system", content: settings.system });
  for (const m of branch(state.doc, message.id)) {
    messages.push({ role: m.role, content: m.role === "user" ? sentText(m) : m.text });
  }
  try {
    const holder = document.createElement("div");
    const view = new AnswerView(holder, message, state.follower);
    view.resume(message.text);
    node.replaceWith(view.node);
    state.view = view;
    await continueTurn(settings, messages, view, state.controller.signal);
  } catch (error) {
    showError(error.message);
  } finally {
    state.controller = null;
    await keep().catch((error) => showError(`The conversation could not be kept: ${error.message}`));
    finishAnswer(message);
    setBusy(false);
  }
}

async function ensureModel(model, signal) {
  await refreshModels(model); // a model may have been unloaded meanwhile
  const listed = modelOf(model);
  if (!listed || !listed.loaded) {
    const length = Number($("context-length").value) || null;
    await loadModel(model, length, $("load"), $("load-bar"), signal);
  }
}

function stop() {
  if (state.controller) state.controller.abort();
}

/** Keeps the conversation on the server and shows it in the list. */
async function keep() {
  if (!state.doc || !state.doc.messages.length) return;
  await saveConversation(state.doc);
  await showList();
}

// -- the conversation list ------------------------------------------------------------

// Lists are fetched concurrently (start-up, a search per keystroke, after a save); only
// the newest request's answer is drawn, so a slow earlier one cannot undo a search.
let listRequests = 0;

async function showList() {
  const request = ++listRequests;
  const summaries = await listConversations($("search").value.trim());
  if (request !== listRequests) return;
  state.summaries = summaries;
  renderList($("conversations"), state.summaries, state.doc && state.doc.id, {
    open: openConversation,
    rename: async (summary) => {
      const title = prompt("A new name for this conversation:", summary.title);
      if (title === null || !title.trim()) return;
      await renameConversation(summary.id, title.trim());
      if (state.doc && state.doc.id === summary.id) state.doc.title = title.trim();
      await showList();
    },
    remove: async (summary) => {
      if (!confirm(`Delete “${summary.title || "untitled"}” for good?`)) return;
      await deleteConversation(summary.id);
      if (state.doc && state.doc.id === summary.id) newChat();
      await showList();
    },
  });
}

async function openConversation(id) {
  if (state.controller) return;
  showError("");
  try {
    const doc = await loadConversation(id);
    doc.current ||= doc.messages.length ? doc.messages[doc.messages.length - 1].id : null;
    state.doc = doc;
    if (doc.settings) showSettings(doc.settings);
    fillPicker($("model"), state.models, doc.settings && doc.settings.model);
    showModelState();
    showBranch();
    await showList();
    closeSidebarOnNarrow();
  } catch (error) {
    showError(`This conversation could not be opened: ${error.message}`);
  }
}

function newChat() {
  if (state.controller) return;
  state.doc = null;
  $("messages").replaceChildren();
  $("context-meter").textContent = "";
  showList().catch(() => {});
  $("prompt").focus();
}

// -- attachments ----------------------------------------------------------------------

async function attach(event) {
  const files = [...event.target.files];
  event.target.value = "";
  const errors = [], notes = [];
  state.reading.push(...files.map((file) => file.name));
  showAttached();
  for (const file of files) {
    try {
      const read = await readAttachment(file);
      if (read instanceof Error) errors.push(read.message);
      else state.attached.push(read);
      if (read.note) notes.push(`${read.name}: ${read.note}.`);
    } catch (error) { // the PDF reader could not be loaded
      errors.push(`${file.name} could not be read: ${error.message}`);
    }
    state.reading.splice(state.reading.indexOf(file.name), 1);
    showAttached();
  }
  showError(errors.join(" "));
  if (notes.length) announce(notes.join(" "));
}

function showAttached() {
  const reading = state.reading.map((name) => {
    const item = document.createElement("li");
    item.className = "reading";
    item.textContent = `Reading ${name}…`;
    return item;
  });
  $("attached").replaceChildren(...state.attached.map((file, index) => {
    const item = document.createElement("li");
    item.textContent = `📎 ${file.name} `;
    if (file.note) {
      const note = document.createElement("span");
      note.className = "note";
      note.textContent = `(${file.note}) `;
      item.append(note);
    }
    const remove = document.createElement("button");
    remove.type = "button";
    remove.textContent = "×";
    remove.setAttribute("aria-label", `Remove ${file.name}`);
    remove.addEventListener("click", () => { state.attached.splice(index, 1); showAttached(); });
    item.append(remove);
    return item;
  }), ...reading);
}

// -- models ---------------------------------------------------------------------------

async function loadChosen() {
  const model = $("model").value;
  if (!model) return;
  showError("");
  $("load-model").disabled = true;
  try {
    const listed = modelOf(model);
    const length = Number($("context-length").value) || null;
    if (listed && listed.loaded && listed.instance && length && length !== listed.context) {
      await ejectModel(listed.instance); // a new context length is a new load
    }
    await loadModel(model, length, $("load"), $("load-bar"), null);
  } catch (error) {
    showError(`The model could not be loaded: ${error.message}`);
  } finally {
    $("load-model").disabled = false;
    await refreshModels(model).catch(() => {});
  }
}

async function ejectChosen() {
  const model = modelOf($("model").value);
  if (!model || !model.instance) return;
  try {
    await ejectModel(model.instance);
  } catch (error) {
    showError(`The model could not be ejected: ${error.message}`);
  }
  await refreshModels(model.id).catch(() => {});
}

async function startDownload() {
  const name = $("download-name").value.trim();
  if (!name) return;
  const bar = $("download-bar");
  const said = $("download-state");
  bar.hidden = false;
  bar.removeAttribute("value");
  try {
    await download(name, (status) => {
      if (status.total_size_bytes) {
        bar.max = status.total_size_bytes;
        bar.value = status.downloaded_bytes || 0;
      }
      const mib = (bytes) => `${((bytes || 0) / 2 ** 20).toFixed(0)} MiB`;
      said.textContent = `${status.status}: ${mib(status.downloaded_bytes)}`
        + (status.total_size_bytes ? ` of ${mib(status.total_size_bytes)}` : "");
    });
    said.textContent = "Downloaded: it is in the model list.";
    await refreshModels($("model").value);
  } catch (error) {
    said.textContent = "";
    showError(`The download failed: ${error.message}`);
  } finally {
    bar.hidden = true;
  }
}

// -- layout, keys, connection -----------------------------------------------------------

function toggle(buttonId, panelId) {
  const panel = $(panelId);
  panel.hidden = !panel.hidden;
  $(buttonId).setAttribute("aria-expanded", String(!panel.hidden));
}

function setSidebar(open) {
  document.body.classList.toggle("sidebar-open", open);
  $("open-sidebar").setAttribute("aria-expanded", String(open));
}

function closeSidebarOnNarrow() {
  if (matchMedia("(max-width: 760px)").matches) setSidebar(false);
}

function composeKeys(event) {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    $("composer").requestSubmit();
  }
}

function globalKeys(event) {
  if (event.key === "Escape" && state.controller) {
    event.preventDefault();
    stop();
  }
}

function watchConnection() {
  let retry = null;
  connection.watch((up) => {
    const banner = $("connection");
    banner.hidden = up;
    banner.textContent = up ? "" : "The server is not answering: retrying…";
    document.body.classList.toggle("offline", !up);
    if (!up && !retry) {
      retry = setInterval(() => {
        refreshModels($("model").value).then(() => showList()).catch(() => {});
      }, RETRY_EVERY_MS);
    } else if (up && retry) {
      clearInterval(retry);
      retry = null;
    }
    if (!up) $("status-body").replaceChildren("Not answering.");
  });
}

function watchStatus() {
  const tick = () => {
    if (!document.hidden && connection.up) refreshStatus($("status-body")).catch(() => {});
  };
  tick();
  setInterval(tick, STATUS_EVERY_MS);
}

async function start() {
  state.follower = new Follower($("messages"), $("jump"));
  setBusy(false);
  $("composer").addEventListener("submit", (event) => {
    send(event).catch((error) => showError(error.message));
  });
  $("prompt").addEventListener("keydown", composeKeys);
  document.addEventListener("keydown", globalKeys);
  $("stop").addEventListener("click", stop);
  $("new-chat").addEventListener("click", newChat);
  $("settings").addEventListener("change", saveSettings);
  $("settings").addEventListener("submit", (event) => event.preventDefault());
  $("model").addEventListener("change", saveSettings);
  $("toggle-settings").addEventListener("click", () => toggle("toggle-settings", "settings"));
  $("open-sidebar").addEventListener("click", () => setSidebar(true));
  $("close-sidebar").addEventListener("click", () => setSidebar(false));
  $("load-model").addEventListener("click", loadChosen);
  $("eject-model").addEventListener("click", ejectChosen);
  $("download").addEventListener("click", startDownload);
  $("attach").addEventListener("change", attach);
  $("search").addEventListener("input", () => showList().catch(() => {}));
  $("export").addEventListener("click", () => {
    exportConversations(state.summaries.map((c) => c.id)).catch((e) => showError(e.message));
  });
  $("import").addEventListener("change", async (event) => {
    const [file] = event.target.files;
    event.target.value = "";
    if (!file) return;
    try {
      await importConversations(file);
      await showList();
    } catch (error) {
      showError(`The file could not be imported: ${error.message}`);
    }
  });
  watchConnection();
  const saved = JSON.parse(localStorage.getItem(SETTINGS) || "{}");
  showSettings(saved);
  try {
    await refreshModels(saved.model);
    await showList();
  } catch (error) {
    showError(error instanceof Unreachable ? error.message
      : `The model list could not be read: ${error.message}`);
  }
  watchStatus();
  document.body.dataset.ready = "true";
}

start();
