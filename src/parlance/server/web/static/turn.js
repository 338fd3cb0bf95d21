// One turn of a conversation through the Responses API: `stream: true`, the whole
// branch on screen sent as `input` (the page keeps the conversation, so an edit or a
// regeneration is just another branch), and the conversation's context policy:
// `rolling` sends `truncation: "auto"` (the server drops the oldest turns that do not
// fit), the others are applied by the page when the server answers that the context is
// too small (conversation.js). The stream's events are drawn into an AnswerView as
// they arrive. `X-Parlance-Progress: on` asks the server for its own
// `parlance.prompt_progress` events (prompt tokens evaluated of the total), which the
// Responses API has no event for. "Continue" goes through Chat Completions, whose
// `continue_final_message` carries on an answer where it stopped.

import { postJSON, serverEvents } from "./api.js";

const ENDED = new Set(["response.completed", "response.incomplete", "response.failed"]);
const PROGRESS = { "X-Parlance-Progress": "on" };

function sampling(settings, body, maxTokensName) {
  if (settings.temperature !== null) body.temperature = settings.temperature;
  if (settings.topP !== null && settings.topP !== undefined) body.top_p = settings.topP;
  if (settings.maxTokens !== null) body[maxTokensName] = settings.maxTokens;
  return body;
}

/** The request body of a turn from the conversation's settings and its input items. */
export function turnBody(settings, input) {
  const body = { model: settings.model, input, stream: true, store: false };
  if (settings.system) body.instructions = settings.system;
  if (settings.contextPolicy === "rolling") body.truncation = "auto";
  if (settings.mcp && settings.mcp.length) {
    body.tools = settings.mcp.map((label) => ({
      type: "mcp", server_label: label, require_approval: "never",
    }));
  }
  return sampling(settings, body, "max_output_tokens");
}

function timer() {
  const sent = performance.now();
  let first = null;
  return {
    first() { if (first === null) first = performance.now(); },
    stats(result) {
      return {
        ttft: first === null ? null : (first - sent) / 1000,
        tokens: result.usage ? (result.usage.output_tokens ?? result.usage.completion_tokens)
          : null,
        seconds: first === null ? 0 : (performance.now() - first) / 1000,
        status: result.status,
      };
    },
  };
}

/** Runs one turn; resolves with {status, usage, error}. Aborting `signal` stops it: the
 * server cancels the generation when the connection closes. A refusal before the
 * stream (HTTP 4xx) is thrown, so the caller can apply the context policy. */
export async function runTurn(body, view, signal) {
  const clock = timer();
  const result = { status: "stopped", usage: null };
  try {
    const response = await postJSON("/v1/responses", body, signal, PROGRESS);
    for await (const { event, data } of serverEvents(response)) {
      const type = data.type || event;
      if (type === "error") throw new Error(data.message || (data.error && data.error.message));
      if (ENDED.has(type)) {
        result.status = data.response.status;
        result.usage = data.response.usage;
        if (data.response.error) view.note(data.response.error.message, "error");
        const reason = data.response.incomplete_details && data.response.incomplete_details.reason;
        if (reason) view.note(`Incomplete: ${reason.replaceAll("_", " ")}.`);
      } else drawEvent(type, data, view, clock.first);
    }
  } catch (error) {
    if (error.name === "AbortError") {
      result.status = "stopped";
    } else if (error.status && !view.record.text && !view.record.reasoning) {
      view.node.remove();
      throw error; // refused before anything was generated
    } else {
      result.status = "failed";
      view.note(error.message, "error");
    }
  }
  view.done(clock.stats(result));
  return result;
}

/** Continues the answer `view.record` (already on screen up to its text) through Chat
 * Completions' `continue_final_message`. */
export async function continueTurn(settings, messages, view, signal) {
  const clock = timer();
  const result = { status: "stopped", usage: null };
  const body = sampling(settings, {
    model: settings.model, messages, stream: true, stream_options: { include_usage: true },
    add_generation_prompt: false, continue_final_message: true,
  }, "max_tokens");
  try {
    const response = await postJSON("/v1/chat/completions", body, signal, PROGRESS);
    for await (const { data } of serverEvents(response)) {
      if (data.error) throw new Error(data.error.message || String(data.error));
      if (data.usage) result.usage = data.usage;
      const choice = (data.choices || [])[0];
      if (!choice) continue;
      const delta = choice.delta || {};
      if (delta.reasoning_content) { clock.first(); view.addReasoning(-1, delta.reasoning_content); }
      if (delta.content) { clock.first(); view.addText(0, delta.content); }
      if (choice.finish_reason) {
        result.status = choice.finish_reason === "length" ? "incomplete" : "completed";
      }
    }
  } catch (error) {
    if (error.name !== "AbortError") {
      result.status = "failed";
      view.note(error.message, "error");
    }
  }
  view.done(clock.stats(result));
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
