// The model picker: every model the server may serve, loaded or loadable (LM Studio's
// `/api/v1/models`, or `/v1/models` where that is missing), with its context; loading
// (with a context length of the person's choosing, and a progress bar) and ejecting
// from the picker; downloads by link or catalog name, with their progress.

import { ApiError, json, postJSON, serverEvents } from "./api.js";

/** [{id, loaded, instance, context, maxContext}] */
export async function listModels() {
  try {
    const body = await json("/api/v1/models");
    return body.models.filter((m) => m.type !== "embedding").map((m) => {
      const instance = m.loaded_instances[0] || null;
      return { id: m.key, loaded: Boolean(instance), instance: instance && instance.id,
        context: instance && instance.config ? instance.config.context_length : null,
        maxContext: m.max_context_length || null };
    });
  } catch (error) {
    if (error.status !== 404) throw error;
    const body = await json("/v1/models");
    return body.data.map((m) => ({ id: m.id, loaded: true, instance: null, context: null,
      maxContext: null }));
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

/** "loaded · context 4,096 of 8,192" for the picker's line. */
export function describeModel(model) {
  if (!model) return "";
  const max = model.maxContext ? ` of ${model.maxContext.toLocaleString()}` : "";
  if (model.loaded) {
    return model.context ? `loaded · context ${model.context.toLocaleString()}${max} tokens`
      : "loaded";
  }
  return model.maxContext ? `not loaded · up to ${model.maxContext.toLocaleString()} tokens`
    : "not loaded";
}

/** Loads `model` (with `contextLength` if given) through LM Studio's load endpoint,
 * streamed so its progress shows; resolves once loaded, or when `stopped` aborts (the
 * server finishes the load all the same). */
export async function loadModel(model, contextLength, panel, bar, stopped) {
  const controller = new AbortController();
  if (stopped) stopped.addEventListener("abort", () => controller.abort(), { once: true });
  const body = { model };
  if (contextLength) body.context_length = contextLength;
  panel.querySelector("span").textContent = `Loading ${model}`;
  bar.value = 0;
  panel.hidden = false;
  try {
    const response = await postJSON("/api/v1/models/load", body, controller.signal,
      { Accept: "text/event-stream" });
    for await (const { data } of serverEvents(response)) {
      if (data.type === "model_load.progress") bar.value = data.progress;
      else if (data.type === "error") {
        throw new ApiError(400, data.error ? data.error.message : data.message);
      } else if (data.type === "model_load.end") return;
    }
  } catch (error) {
    if (error.name !== "AbortError") throw error;
  } finally {
    controller.abort();
    panel.hidden = true;
  }
}

export async function ejectModel(instance) {
  await postJSON("/api/v1/models/unload", { instance_id: instance });
}

/** Starts a download of `name` (a link to a .gguf file, or a catalog name where the
 * server resolves them); `progress(status)` is called with each status until it ends. */
export async function download(name, progress, pollMs = 1000) {
  const started = await (await postJSON("/api/v1/models/download", { model: name })).json();
  let status = started;
  progress(status);
  while (status.status === "downloading" || status.status === "paused") {
    await new Promise((resolve) => setTimeout(resolve, pollMs));
    status = await json(`/api/v1/models/download/status/${encodeURIComponent(started.job_id)}`);
    progress(status);
  }
  if (status.status === "failed") throw new Error(status.error || "The download failed.");
  return status;
}
