// The messages on the page: the person's words, and answers built up as their stream
// arrives (reasoning in a collapsible block, text as markdown appended as it completes,
// tool calls with their arguments and results, the answer's stats), each with its
// actions: copy, edit (a user message), regenerate and continue (an answer), and
// the arrows between a message's siblings (its other versions).

import { MarkdownStream, copyText, renderMarkdown } from "./markdown.js";

export function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function button(label, title, onClick, className = "action") {
  const node = element("button", className, label);
  node.type = "button";
  node.title = title;
  node.setAttribute("aria-label", title);
  node.addEventListener("click", onClick);
  return node;
}

/** "TTFT 0.31 s · 42 tokens · 17.2 tokens/s · stopped" */
export function statsText({ ttft = null, tokens = null, seconds = 0 } = {}, status = null) {
  const parts = [];
  if (ttft !== null && ttft !== undefined) parts.push(`TTFT ${ttft.toFixed(2)} s`);
  if (tokens !== null && tokens !== undefined) parts.push(`${tokens} tokens`);
  if (tokens && seconds > 0) parts.push(`${(tokens / seconds).toFixed(1)} tokens/s`);
  if (status && status !== "completed") parts.push(status);
  return parts.join(" · ");
}

/** The action bar under a message. `actions`: {copy, edit, regenerate, continue,
 * previous, next, place: [i, n]} (each optional). */
export function actionBar(actions) {
  const bar = element("div", "actions");
  if (actions.place && actions.place[1] > 1) {
    const [at, count] = actions.place;
    bar.append(button("‹", "Previous version", actions.previous, "action sibling"),
      element("span", "place", `${at} / ${count}`),
      button("›", "Next version", actions.next, "action sibling"));
  }
  if (actions.copy) {
    const copy = button("Copy", "Copy this message", () => copyText(actions.copy(), copy));
    bar.append(copy);
  }
  if (actions.edit) bar.append(button("Edit", "Edit and send again", actions.edit));
  if (actions.regenerate) bar.append(button("Regenerate", "Answer again", actions.regenerate));
  if (actions.continue) bar.append(button("Continue", "Continue this answer", actions.continue));
  return bar;
}

export function userNode(message) {
  const node = element("div", "message user");
  node.dataset.id = message.id;
  node.append(element("div", "body", message.text));
  for (const file of message.attachments || []) {
    const note = file.note ? `; ${file.note}` : "";
    node.append(element("div", "attachment",
      `📎 ${file.name} (${file.text.length.toLocaleString()} characters${note})`));
  }
  return node;
}

/** A stored answer, drawn whole. */
export function storedAnswerNode(message) {
  const node = element("div", "message assistant");
  node.dataset.id = message.id;
  node.append(element("div", "meta", message.model || ""));
  if (message.reasoning) {
    const details = element("details", "reasoning");
    details.append(element("summary", "", reasoningSummary(message.stats)),
      element("div", "text", message.reasoning));
    node.append(details);
  }
  for (const call of message.tools || []) node.append(toolNode(call));
  const body = element("div", "body markdown");
  renderMarkdown(body, message.text || "");
  node.append(body);
  if (message.note) node.append(element("div", "note", message.note));
  if (message.error) node.append(element("div", "error", message.error));
  node.append(element("div", "stats", statsText(message.stats || {}, message.status)));
  return node;
}

function reasoningSummary(stats) {
  return stats && stats.thought ? `Thought for ${stats.thought.toFixed(1)} s` : "Reasoning";
}

function toolNode(call) {
  const node = element("details", "tool-call");
  const where = call.server_label ? ` on ${call.server_label}` : "";
  node.append(element("summary", "", `Tool call: ${call.name || "?"}${where}`),
    element("pre", "arguments", prettyJSON(call.arguments || "")),
    element("pre", "output", call.error ? `Error: ${call.error}` : (call.output ?? "")));
  return node;
}

/** One answer as its stream arrives; `record` is the message it fills in (text,
 * reasoning, tool calls), kept even when the answer is stopped or fails. */
export class AnswerView {
  constructor(list, record, follower) {
    this.record = record;
    this.follower = follower;
    this.node = element("div", "message assistant streaming");
    this.node.dataset.id = record.id;
    this.node.append(element("div", "meta", record.model));
    this.blocks = new Map();
    this.pending = null; // the text block whose newest part is still to be drawn
    this.frame = null;
    this.reasoningStarted = null;
    this.waiting = element("div", "progress waiting");
    this.waiting.append(element("span", "", "Processing the prompt…"),
      element("progress", "prompt-bar"));
    this.node.append(this.waiting);
    list.append(this.node);
    this.follower.grew();
  }

  started() {
    this.waiting.remove();
  }

  /** `done` of `total` prompt tokens evaluated: a determinate bar until output begins;
   * a later model call of the turn (after a tool's result) shows its own again. */
  promptProgress(done, total) {
    if (!this.waiting.isConnected) {
      if (done >= total) return;
      this.node.append(this.waiting);
    }
    const bar = this.waiting.querySelector("progress");
    bar.max = total;
    bar.value = done;
    // (an engine that cannot count an upstream's prompt tokens reports 0 of 1, 1 of 1)
    const tokens = total > 1 ? ` (${done} of ${total} tokens)` : "";
    const percent = total > 0 ? Math.floor((100 * done) / total) : 100;
    this.waiting.querySelector("span").textContent =
      `Processing the prompt: ${percent}%${tokens}`;
    this.follower.grew();
  }

  reasoning(index) {
    return this.block(index, () => {
      const details = element("details", "reasoning");
      details.open = true;
      details.append(element("summary", "", "Reasoning"), element("div", "text"));
      this.reasoningStarted = performance.now();
      return { node: details, text: "" };
    });
  }

  addReasoning(index, delta) {
    const block = this.reasoning(index);
    block.text += delta;
    this.record.reasoning = (this.record.reasoning || "") + delta;
    block.node.querySelector(".text").append(delta);
    this.follower.grew();
  }

  endReasoning(index) {
    const block = this.blocks.get(index);
    if (!block) return;
    block.node.open = false;
    if (this.reasoningStarted !== null) {
      const thought = (performance.now() - this.reasoningStarted) / 1000;
      this.record.stats = { ...(this.record.stats || {}), thought };
      block.node.querySelector("summary").textContent = reasoningSummary({ thought });
    }
  }

  /** Shows the text the record already has (an answer being continued). */
  resume(text) {
    const block = this.block(0, () => {
      const node = element("div", "body markdown");
      return { node, text: "", stream: new MarkdownStream(node) };
    });
    block.text = text;
    this.pending = block;
    this.render();
  }

  /** Text is drawn at most once a frame, and only its newest part (MarkdownStream). */
  addText(index, delta) {
    const block = this.block(index, () => {
      const node = element("div", "body markdown");
      return { node, text: "", stream: new MarkdownStream(node) };
    });
    block.text += delta;
    this.record.text = (this.record.text || "") + delta;
    this.pending = block;
    if (!this.frame) this.frame = requestAnimationFrame(() => this.render());
  }

  render(final = false) {
    this.frame = null;
    if (!this.pending) return;
    this.pending.stream.draw(this.pending.text, final);
    if (final) this.pending = null;
    this.follower.grew();
  }

  /** A function or MCP call: its name, arguments as they stream, then its result. */
  toolCall(index, item) {
    return this.block(index, () => {
      const call = { name: item.name, server_label: item.server_label || null,
        arguments: item.arguments || "", output: null, error: null };
      (this.record.tools ||= []).push(call);
      const node = toolNode(call);
      node.open = true;
      return { node, text: item.arguments || "", call };
    });
  }

  addArguments(index, delta) {
    const block = this.blocks.get(index);
    if (!block) return;
    block.text += delta;
    block.call.arguments = block.text;
    block.node.querySelector(".arguments").textContent = block.text;
    this.follower.grew();
  }

  finishToolCall(index, item) {
    const block = this.toolCall(index, item);
    block.call.arguments = item.arguments || block.text;
    block.node.querySelector(".arguments").textContent = prettyJSON(block.call.arguments);
    const output = block.node.querySelector(".output");
    if (item.error) block.call.error = String(item.error);
    else if (item.output !== undefined && item.output !== null) block.call.output = item.output;
    if (block.call.error) output.textContent = `Error: ${block.call.error}`;
    else if (block.call.output !== null) output.textContent = block.call.output;
    else if (item.type === "function_call") {
      output.textContent = "(a client-side function: this page runs none)";
    }
  }

  note(text, className = "note") {
    if (className === "error") this.record.error = text;
    this.node.append(element("div", className, text));
  }

  /** The answer has ended (`stats.status`: completed, incomplete, stopped, failed). */
  done(stats) {
    if (this.frame) cancelAnimationFrame(this.frame);
    for (const block of this.blocks.values()) {
      if (block.stream) { this.pending = block; this.render(true); }
    }
    this.started();
    this.node.classList.remove("streaming");
    this.record.status = stats.status;
    this.record.stats = { ...(this.record.stats || {}), ttft: stats.ttft, tokens: stats.tokens,
      seconds: stats.seconds };
    this.node.append(element("div", "stats", statsText(this.record.stats, stats.status)));
    this.follower.grew();
  }

  block(index, make) {
    let block = this.blocks.get(index);
    if (!block) {
      if (this.pending) this.render(); // the text before this block is drawn
      block = make();
      this.blocks.set(index, block);
      this.started();
      this.node.append(block.node);
    }
    return block;
  }
}

export function prettyJSON(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}
