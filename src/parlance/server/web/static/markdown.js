// Model output as safe HTML: markdown rendered by marked, then sanitized by DOMPurify.
// No script, inline event handler, style, form or frame survives, and links may only
// point to http(s) or mailto (the page's Content-Security-Policy is a second wall).

import { marked } from "./vendor/marked.esm.js";
import DOMPurify from "./vendor/purify.es.js";

const SAFE = {
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe", "object",
    "embed", "svg", "math"],
  FORBID_ATTR: ["style"],
  ALLOWED_URI_REGEXP: /^(?:https?:|mailto:|#)/i,
};

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer nofollow");
  }
});

/** Fill `element` with `text` rendered as sanitized markdown. */
export function renderMarkdown(element, text) {
  const html = marked.parse(text, { gfm: true, breaks: false, async: false });
  element.innerHTML = DOMPurify.sanitize(html, SAFE);
}
