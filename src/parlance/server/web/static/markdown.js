// Model output as safe HTML: markdown rendered by marked, then sanitized by DOMPurify.
// No script, inline event handler, style, form or frame survives, links may only point
// to http(s) or mailto (the page's Content-Security-Policy is a second wall), and HTML
// a model writes is shown as text, never parsed (an unclosed `<math><style>` cannot
// swallow the rest of an answer). Code is highlighted by highlight.js with a language
// label and a copy button; `$…$`, `$$…$$`, `\(…\)` and `\[…\]` are drawn by KaTeX.
//
// A streamed answer is drawn by `MarkdownStream`: what is complete (up to the last
// blank line outside code, or a line boundary once the tail grows long) is rendered
// once and appended; only the short tail is drawn again each frame, so a long answer
// costs the same per frame at its end as at its start.

import { marked } from "./vendor/marked.esm.js";
import DOMPurify from "./vendor/purify.es.js";
import hljs from "./vendor/highlight/highlight.es.min.js";

const SAFE = {
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe", "object",
    "embed", "svg", "math"],
  FORBID_ATTR: ["style"],
  ALLOWED_URI_REGEXP: /^(?:https?:|mailto:|#)/i,
};
const TAIL_CHARS = 1500; // past this, the tail is cut at a line boundary, not a blank line
const HIGHLIGHT_CHARS = 100_000; // longer code is shown plain (highlighting it would stall)

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer nofollow");
  }
});

const escape = (text) => text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function mathToken(name, level, pattern, display) {
  return {
    name, level,
    start: (src) => src.search(level === "block" ? /(\$\$|\\\[)/ : /(\$|\\\()/),
    tokenizer(src) {
      const match = pattern.exec(src);
      // ($$…$$ and $…$ are group 1, \[…\] and \(…\) group 2)
      if (match) return { type: name, raw: match[0], tex: (match[1] ?? match[2]).trim(), display };
      return undefined;
    },
    renderer: (token) => {
      const tag = token.display ? "div" : "span";
      return `<${tag} class="math" data-display="${token.display}">${escape(token.tex)}</${tag}>`;
    },
  };
}

marked.use({
  gfm: true, breaks: false, async: false,
  extensions: [
    mathToken("mathBlock", "block", /^(?:\$\$([\s\S]+?)\$\$|\\\[([\s\S]+?)\\\])[ \t]*(?:\n|$)/, true),
    mathToken("mathInline", "inline", /^(?:\$(?!\s)((?:\\.|[^\\$\n])+?)(?<!\s)\$(?![\d$])|\\\((.+?)\\\))/, false),
  ],
  renderer: {
    html: (token) => escape(token.text ?? token.raw), // a model's HTML is text
    code(token) {
      const language = (token.lang || "").split(/\s/)[0];
      const label = language ? ` data-language="${escape(language)}"` : "";
      const named = language ? ` class="language-${escape(language)}"` : "";
      return `<pre${label}><code${named}>${escape(token.text)}</code></pre>`;
    },
  },
});
/** Sanitized HTML of `text` rendered as markdown. */
export function markdownHTML(text) {
  return DOMPurify.sanitize(marked.parse(text), SAFE);
}

/** Fill `element` with `text` rendered as sanitized markdown, decorated. */
export function renderMarkdown(element, text) {
  element.innerHTML = markdownHTML(text);
  decorate(element);
}

/** Code blocks highlighted and given a label and a copy button; math typeset. */
export function decorate(root) {
  for (const pre of root.querySelectorAll("pre:not(.decorated)")) {
    pre.classList.add("decorated");
    const code = pre.querySelector("code");
    if (code && code.textContent.length <= HIGHLIGHT_CHARS) {
      const language = pre.dataset.language;
      if (!language || hljs.getLanguage(language)) {
        try { hljs.highlightElement(code); } catch { /* shown plain */ }
      }
    }
    const bar = document.createElement("div");
    bar.className = "code-bar";
    const label = document.createElement("span");
    label.textContent = pre.dataset.language || "text";
    const copy = document.createElement("button");
    copy.type = "button";
    copy.className = "copy-code";
    copy.textContent = "Copy";
    copy.setAttribute("aria-label", `Copy the ${label.textContent} code`);
    copy.addEventListener("click", () => copyText(code ? code.textContent : "", copy));
    bar.append(label, copy);
    pre.before(bar);
  }
  const katex = globalThis.katex;
  for (const node of root.querySelectorAll(".math:not(.typeset)")) {
    node.classList.add("typeset");
    if (!katex) continue;
    try {
      katex.render(node.textContent, node, {
        displayMode: node.dataset.display === "true", throwOnError: false, trust: false,
        maxSize: 50, maxExpand: 1000,
      });
    } catch { /* left as its TeX */ }
  }
}

/** Copies `text`; `button` says so for a moment. */
export async function copyText(text, button) {
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    const area = document.createElement("textarea");
    area.value = text;
    document.body.append(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }
  if (button) {
    const was = button.textContent;
    button.textContent = "Copied";
    setTimeout(() => { button.textContent = was; }, 1200);
  }
}

/** Where the complete part of `text` (from `from`, outside any code fence or math
 * block there) ends: after its last blank line outside code, or, once the rest is
 * long, after its last line that a new block may follow. */
export function completeUpTo(text, from) {
  let fence = null;
  let math = false;
  let blank = -1;
  let line = -1;
  let at = from;
  while (at < text.length) {
    const end = text.indexOf("\n", at);
    if (end < 0) break; // the last line is still being written
    const content = text.slice(at, end);
    const trimmed = content.trimStart();
    const next = text[end + 1];
    if (fence) {
      if (trimmed.startsWith(fence) && trimmed.slice(fence.length).trim() === "") fence = null;
    } else if (/^(`{3,}|~{3,})/.test(trimmed)) {
      fence = /^(`{3,}|~{3,})/.exec(trimmed)[1];
    } else if (trimmed.startsWith("$$") && (trimmed.length === 2 || !trimmed.endsWith("$$"))) {
      math = !math;
    }
    const outside = !fence && !math;
    if (outside && content.trim() === "") blank = end + 1;
    if (outside && next !== undefined && !/[\s|]/.test(next) && !content.startsWith("|")
        && content.trim() !== "") line = end + 1;
    at = end + 1;
  }
  if (blank > from) return blank;
  if (line > from && line - from > TAIL_CHARS) return line;
  return from;
}

/** A growing markdown text drawn incrementally into `element`. */
export class MarkdownStream {
  constructor(element) {
    this.element = element;
    this.text = "";
    this.done = 0;
    this.tail = document.createElement("div");
    this.tail.className = "tail";
    element.append(this.tail);
  }

  /** Draws what arrived since the last call (`final`: the text is complete). */
  draw(text, final = false) {
    this.text = text;
    const cut = final ? text.length : completeUpTo(text, this.done);
    if (cut > this.done) {
      const block = document.createElement("div");
      block.className = "block";
      block.innerHTML = markdownHTML(text.slice(this.done, cut));
      decorate(block);
      this.tail.before(block);
      this.done = cut;
    }
    const rest = text.slice(this.done);
    this.tail.innerHTML = rest ? markdownHTML(rest) : "";
    if (final) this.tail.remove();
  }
}
