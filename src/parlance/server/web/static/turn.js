// One turn of a conversation through the Responses API: `stream: true`, `store: true`,
// and `previous_response_id` so the server keeps the history. The stream's events are
// drawn into an AnswerView as they arrive. `X-Parlance-Progress: on` asks the server for
// its own `parlance.prompt_progress` events (prompt tokens evaluated of the total),
// which the Responses API has no event for.

import { postJSON, serverEvents } from "./api.js";

const ENDED = new Set(["response.completed", "response.incomplete", "response.failed"]);
const PROGRESS = { "X-Parlance-Progress": "on" };

/** The request body of a turn from the page's settings. */
export function turnBody(settings, input, previousId) {
  const body = { model: settings.model, input, stream: true, store: true };
  if (previousId) body.previous_response_id = previousId;
  if (settings.system) body.instructions = settings.system;
  if (settings.temperature !== null) body.temperature = settings.temperature;
  if (settings.maxTokens !== null) body.max_output_tokens = settings.maxTokens;
  if (settings.mcp.length) {
    body.tools = settings.mcp.map((label) => ({
      type: "mcp", server_label: label, require_approval: "never",
    }));
  }
  return body;
}

/** Runs one turn; resolves with {id, status, usage}. Aborting `signal` stops it: the
 * server cancels the generation when the connection closes. */
export async function runTurn(body, view, signal) {
  const sent = performance.now();
  let first = null;
  const result = { id: null, status: "stopped", usage: null };
  const firstOutput = () => { if (first === null) first = performance.now(); };
  const stats = () => ({
    ttft: first === null ? null : (first - sent) / 1000,
    tokens: result.usage ? result.usage.output_tokens : null,
    seconds: first === null ? 0 : (performance.now() - first) / 1000,
    status: result.status,
  });
  try {
    const response = await postJSON("/v1/responses", body, signal, PROGRESS);
    for await (const { event, data } of serverEvents(response)) {
      const type = data.type || event;
      if (type === "error") throw new Error(data.message || (data.error && data.error.message));
      if (type === "response.created") result.id = data.response.id;
      else if (ENDED.has(type)) {
        result.status = data.response.status;
        result.usage = data.response.usage;
        if (data.response.error) view.note(data.response.error.message, "error");
      } else drawEvent(type, data, view, firstOutput);
    }
  } catch (error) {
    if (error.name !== "AbortError") {
      result.status = "failed";
      view.note(error.message, "error");
    }
  } finally {
    view.done(stats());
  }
  return result;
}

function drawEvent(type, data, view, firstOutput) {
  const index = data.output_index;
  switch (type) {
    case "parlance.prompt_progress":
      view.promptProgress(data.done, data.total);
      break;
    case "response.output_item.added":
      if (data.item.type === "function_call" || data.item.type === "mcp_call") {
        firstOutput();
        view.toolCall(index, data.item);
      }
      break;
    case "response.reasoning_text.delta":
      firstOutput();
      view.addReasoning(index, data.delta);
      break;
    case "response.reasoning_text.done":
      view.endReasoning(index);
      break;
    case "response.output_text.delta":
      firstOutput();
      view.addText(index, data.delta);
      break;
    case "response.function_call_arguments.delta":
    case "response.mcp_call_arguments.delta":
      view.addArguments(index, data.delta);
      break;
    case "response.output_item.done":
      if (data.item.type === "function_call" || data.item.type === "mcp_call") {
        view.finishToolCall(index, data.item);
      }
      break;
    default:
      break;
  }
}
