// The model picker: every model the server may serve, loaded or loadable (LM Studio's
// `/api/v1/models`, or `/v1/models` where that is missing), and loading a cold model
// with a progress bar. The Responses API loads a model silently, so a cold model is
// loaded first through LM Studio's `/api/v1/chat`, whose stream reports
// `model_load.progress`; that request is dropped as soon as the load has ended.

import { json, postJSON, serverEvents } from "./api.js";

/** [{id, loaded}] */
export async function listModels() {
  try {
    const body = await json("/api/v1/models");
    return body.models.filter((m) => m.type !== "embedding")
      .map((m) => ({ id: m.key, loaded: m.loaded_instances.length > 0 }));
  } catch (error) {
    if (error.status !== 404) throw error;
    const body = await json("/v1/models");
    return body.data.map((m) => ({ id: m.id, loaded: true }));
  }
}

export function fillPicker(select, models, wanted) {
  const chosen = models.some((m) => m.id === wanted) ? wanted : select.value;
  select.replaceChildren(...models.map((m) => {
    const option = document.createElement("option");
    option.value = m.id;
    option.textContent = m.loaded ? `${m.id} (loaded)` : m.id;
    return option;
  }));
  if (chosen) select.value = chosen;
}

/** Loads `model` if it is not loaded, showing its progress; resolves once it is loaded,
 * or at once when `stopped` aborts (the server finishes the load all the same). */
export async function ensureLoaded(model, panel, bar, stopped) {
  const controller = new AbortController();
  stopped.addEventListener("abort", () => controller.abort(), { once: true });
  const body = { model, input: "Hi", stream: true, store: false, max_output_tokens: 1 };
  try {
    const response = await postJSON("/api/v1/chat", body, controller.signal);
    for await (const { data } of serverEvents(response)) {
      if (data.type === "model_load.start") {
        panel.querySelector("span").textContent = `Loading ${model}`;
        bar.value = 0;
        panel.hidden = false;
      } else if (data.type === "model_load.progress") {
        bar.value = data.progress;
      } else if (data.type === "error") {
        throw new Error(data.error ? data.error.message : data.message);
      } else if (data.type !== "chat.start") {
        return; // loaded: the rest of this request is not needed
      }
    }
  } catch (error) {
    if (error.name !== "AbortError") throw error;
  } finally {
    controller.abort();
    panel.hidden = true;
  }
}
