// One message on the page: the person's words, or an answer built up as its stream
// arrives (reasoning in a collapsible block, text as markdown, tool calls with their
// arguments and results, and the answer's stats).

import { renderMarkdown } from "./markdown.js";

const messages = () => document.getElementById("messages");

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

export function showUserMessage(text) {
  const node = element("div", "message user");
  node.append(element("div", "body", text));
  messages().append(node);
  node.scrollIntoView({ block: "end" });
}

/** Shows one answer; each output item of the stream is a block, by its output index. */
export class AnswerView {
  constructor(model) {
    this.node = element("div", "message assistant streaming");
    this.node.append(element("div", "meta", model));
    this.blocks = new Map();
    this.unrendered = null; // the text block whose markdown is still to be drawn
    this.frame = null;
    this.waiting = element("div", "progress waiting");
    this.waiting.append(element("span", "", "Processing the prompt…"),
      element("progress", "prompt-bar"));
    this.node.append(this.waiting);
    messages().append(this.node);
    this.scroll();
  }

  scroll() {
    const list = messages();
    list.scrollTop = list.scrollHeight;
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
    this.scroll();
  }

  reasoning(index) {
    return this.block(index, () => {
      const details = element("details", "reasoning");
      details.open = true;
      details.append(element("summary", "", "Reasoning"), element("div", "text"));
      return { node: details, text: "" };
    });
  }

  addReasoning(index, delta) {
    const block = this.reasoning(index);
    block.text += delta;
    block.node.querySelector(".text").textContent = block.text;
    this.scroll();
  }

  endReasoning(index) {
    const block = this.blocks.get(index);
    if (block) block.node.open = false;
  }

  /** Text is drawn at most once a frame: each drawing renders the whole markdown. */
  addText(index, delta) {
    const block = this.block(index, () => ({ node: element("div", "body markdown"), text: "" }));
    block.text += delta;
    this.unrendered = block;
    if (!this.frame) this.frame = requestAnimationFrame(() => this.render());
  }

  render() {
    this.frame = null;
    if (!this.unrendered) return;
    renderMarkdown(this.unrendered.node, this.unrendered.text);
    this.unrendered = null;
    this.scroll();
  }

  /** A function or MCP call: its name, arguments as they stream, then its result. */
  toolCall(index, item) {
    return this.block(index, () => {
      const node = element("details", "tool-call");
      node.open = true;
      const where = item.server_label ? ` on ${item.server_label}` : "";
      node.append(element("summary", "", `Tool call: ${item.name || "?"}${where}`),
        element("pre", "arguments", item.arguments || ""), element("pre", "output"));
      return { node, text: item.arguments || "" };
    });
  }

  addArguments(index, delta) {
    const block = this.blocks.get(index);
    if (!block) return;
    block.text += delta;
    block.node.querySelector(".arguments").textContent = block.text;
    this.scroll();
  }

  finishToolCall(index, item) {
    const block = this.toolCall(index, item);
    block.node.querySelector(".arguments").textContent = prettyJSON(item.arguments || "");
    const output = block.node.querySelector(".output");
    if (item.error) output.textContent = `Error: ${item.error}`;
    else if (item.output !== undefined && item.output !== null) output.textContent = item.output;
    else if (item.type === "function_call") output.textContent = "(a client-side function: this page runs none)";
  }

  note(text, className = "note") {
    this.node.append(element("div", className, text));
  }

  done({ ttft, tokens, seconds, status }) {
    if (this.frame) cancelAnimationFrame(this.frame);
    this.render();
    this.started();
    this.node.classList.remove("streaming");
    const parts = [];
    if (ttft !== null) parts.push(`TTFT ${ttft.toFixed(2)} s`);
    if (tokens !== null) parts.push(`${tokens} tokens`);
    if (tokens && seconds > 0) parts.push(`${(tokens / seconds).toFixed(1)} tokens/s`);
    if (status && status !== "completed") parts.push(status);
    this.node.append(element("div", "stats", parts.join(" · ")));
  }

  block(index, make) {
    let block = this.blocks.get(index);
    if (!block) {
      this.render(); // the text before this block is complete
      block = make();
      this.blocks.set(index, block);
      this.started();
      this.node.append(block.node);
    }
    return block;
  }
}

function prettyJSON(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}
