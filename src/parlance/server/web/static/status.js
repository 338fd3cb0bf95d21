// The server-status panel: for each loaded model its memory (Ollama's `/api/ps`) and,
// from the Prometheus text at `/metrics`, running and queued requests, slots in use and
// prompt-cache hits, so a person sees why a turn was fast or slow.

import { api, json } from "./api.js";

const SAMPLE = /^parlance_([a-z_]+)\{([^}]*)\}\s+(\S+)$/;

/** {model: {metric: value}} from the metrics text (only samples labelled by model). */
export function parseMetrics(text) {
  const byModel = {};
  for (const line of text.split("\n")) {
    const match = SAMPLE.exec(line);
    if (!match) continue;
    const model = /(?:^|,)model="((?:[^"\\]|\\.)*)"/.exec(match[2]);
    if (!model || match[2].includes("le=")) continue;
    (byModel[model[1]] ||= {})[match[1]] = Number(match[3]);
  }
  return byModel;
}

function megabytes(bytes) {
  return bytes ? `${(bytes / 2 ** 20).toFixed(0)} MiB` : "—";
}

function row(label, value) {
  const line = document.createElement("div");
  line.className = "row";
  const name = document.createElement("span");
  name.textContent = label;
  const shown = document.createElement("span");
  shown.textContent = value;
  line.append(name, shown);
  return line;
}

export async function refreshStatus(panel) {
  const [metrics, ps] = await Promise.all([
    api("/metrics").then((r) => r.text()).then(parseMetrics),
    json("/api/ps"),
  ]);
  const blocks = ps.models.map((loaded) => {
    const name = loaded.model.replace(/:latest$/, "");
    const m = metrics[name] || metrics[loaded.model] || {};
    const hits = (m.prefix_cache_hits_total || 0) + (m.prompt_cache_ram_hits_total || 0)
      + (m.prompt_cache_disk_hits_total || 0);
    const block = document.createElement("div");
    block.className = "model-status";
    block.dataset.model = name;
    const title = document.createElement("strong");
    title.textContent = name;
    block.append(title,
      row("memory", megabytes(loaded.size)),
      row("running", String(m.requests_running ?? "—")),
      row("queued", String(m.requests_waiting ?? "—")),
      row("slots", `${m.slots_in_use ?? "—"} / ${m.slots_total ?? "—"}`),
      row("prompt-cache hits", String(hits)),
      row("prompt tokens reused", String(m.prompt_tokens_cached_total ?? 0)),
      row("prompt tokens evaluated", String(m.prompt_tokens_evaluated_total ?? 0)));
    return block;
  });
  panel.replaceChildren(...(blocks.length ? blocks : [row("no model loaded", "")]));
}
