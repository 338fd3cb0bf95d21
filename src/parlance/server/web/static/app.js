// The page's wiring: settings (kept in this browser), the composer, Send and Stop,
// new chat, the conversation list and the status panel.

import { AnswerView, showUserMessage } from "./answer.js";
import { conversations, forget, remember, renderList, showConversation } from "./history.js";
import { ensureLoaded, fillPicker, listModels } from "./models.js";
import { refreshStatus } from "./status.js";
import { runTurn, turnBody } from "./turn.js";

const $ = (id) => document.getElementById(id);
const SETTINGS = "parlance.settings";
const STATUS_EVERY_MS = 3000;

const state = { conversation: null, head: null, controller: null, models: [] };

function readSettings() {
  const number = (input) => (input.value === "" ? null : Number(input.value));
  return {
    model: $("model").value,
    system: $("system").value.trim(),
    temperature: number($("temperature")),
    maxTokens: number($("max-tokens")),
    mcp: $("mcp").value.split(",").map((s) => s.trim()).filter(Boolean),
  };
}

function restoreSettings() {
  const saved = JSON.parse(localStorage.getItem(SETTINGS) || "{}");
  $("system").value = saved.system || "";
  $("temperature").value = saved.temperature ?? "";
  $("max-tokens").value = saved.maxTokens ?? "";
  $("mcp").value = (saved.mcp || []).join(", ");
  return saved.model;
}

function saveSettings() {
  localStorage.setItem(SETTINGS, JSON.stringify(readSettings()));
}

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = !message;
}

function setBusy(busy) {
  document.body.dataset.state = busy ? "streaming" : "idle";
  $("send").disabled = busy;
  $("stop").disabled = !busy;
}

async function refreshModels(wanted) {
  state.models = await listModels();
  fillPicker($("model"), state.models, wanted);
}

function newChat() {
  state.conversation = null;
  state.head = null;
  $("messages").replaceChildren();
  showList();
}

function showList() {
  renderList($("conversations"), state.conversation, openConversation, (c) => {
    forget(c.id);
    if (c.id === state.conversation) newChat();
    else showList();
  });
}

async function openConversation(entry) {
  if (state.controller) return;
  showError("");
  $("messages").replaceChildren();
  state.conversation = entry.id;
  state.head = entry.head;
  showList();
  try {
    const last = await showConversation(entry.head);
    fillPicker($("model"), state.models, last.model);
  } catch (error) {
    showError(`This conversation could not be loaded: ${error.message}`);
  }
}

async function send(event) {
  event.preventDefault();
  const text = $("prompt").value.trim();
  const settings = readSettings();
  if (!text || !settings.model || state.controller) return;
  saveSettings();
  showError("");
  setBusy(true);
  state.controller = new AbortController();
  try {
    await refreshModels(settings.model); // a model may have been unloaded meanwhile
    const listed = state.models.find((m) => m.id === settings.model);
    if (!listed || !listed.loaded) {
      await ensureLoaded(settings.model, $("load"), $("load-bar"), state.controller.signal);
      if (state.controller.signal.aborted) return;
    }
    $("prompt").value = "";
    showUserMessage(text);
    const view = new AnswerView(settings.model);
    const body = turnBody(settings, text, state.head);
    const result = await runTurn(body, view, state.controller.signal);
    if (result.id && (result.status === "completed" || result.status === "incomplete")) {
      state.conversation ||= result.id;
      state.head = result.id;
      const title = conversations().find((c) => c.id === state.conversation)?.title || text;
      remember(state.conversation, state.head, title, settings.model);
      showList();
    }
  } catch (error) {
    showError(error.message);
  } finally {
    state.controller = null;
    setBusy(false);
    refreshModels(settings.model).catch(() => {});
    refreshStatus($("status-body")).catch(() => {});
  }
}

function stop() {
  if (state.controller) state.controller.abort();
}

function composeKeys(event) {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    $("composer").requestSubmit();
  }
}

function watchStatus() {
  const tick = () => {
    if (!document.hidden) refreshStatus($("status-body")).catch(() => {});
  };
  tick();
  setInterval(tick, STATUS_EVERY_MS);
}

async function start() {
  setBusy(false);
  $("composer").addEventListener("submit", send);
  $("prompt").addEventListener("keydown", composeKeys);
  $("stop").addEventListener("click", stop);
  $("new-chat").addEventListener("click", () => { if (!state.controller) newChat(); });
  $("settings").addEventListener("change", saveSettings);
  $("settings").addEventListener("submit", (event) => event.preventDefault());
  const wanted = restoreSettings();
  showList();
  try {
    await refreshModels(wanted);
  } catch (error) {
    showError(`The model list could not be read: ${error.message}`);
  }
  watchStatus();
  document.body.dataset.ready = "true";
}

start();
