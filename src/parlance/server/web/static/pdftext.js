// A PDF's text, read in this browser by Mozilla's pdf.js (vendored). pdf.js is imported
// only when a PDF is attached, so the page's first load does not carry its 1.7 MB; its
// worker is a same-origin module script, allowed by the page's `script-src 'self'`.
// Only the text layer is read: a scanned PDF (pages that are pictures) has none, and
// this page does no OCR.

export const MAX_PDF_BYTES = 50 * 1024 * 1024;
export const MAX_PDF_PAGES = 300;

const WORKER = new URL("./vendor/pdfjs/pdf.worker.min.mjs", import.meta.url).href;
let library = null;

async function pdfjs() {
  if (!library) {
    library = import("./vendor/pdfjs/pdf.min.mjs").then((module) => {
      module.GlobalWorkerOptions.workerSrc = WORKER;
      return module;
    }, (error) => { library = null; throw error; });
  }
  return library;
}

/** One page's text: its items in reading order, a line break where pdf.js saw one. */
function pageText(content) {
  let text = "";
  for (const item of content.items) {
    if (typeof item.str !== "string") continue; // marked-content boundaries
    text += item.str + (item.hasEOL ? "\n" : "");
  }
  return text.replace(/[ \t]+\n/g, "\n").trim();
}

/** Why `error` (from pdf.js) stops `name` from being read, in words for the page. */
function failure(name, error) {
  if (error?.name === "PasswordException") {
    return new Error(`${name} is password-protected: this page cannot open it (save a copy `
      + "without the password and attach that).");
  }
  const detail = error?.message ? ` (${error.message})` : "";
  if (error?.name === "InvalidPDFException") {
    return new Error(`${name} could not be read as a PDF${detail}: it is damaged or not a PDF.`);
  }
  return new Error(`${name} could not be read${detail}.`); // pdf.js failed within
}

/**
 * The text of `file` (a PDF) as {text, pages, read, cut}: each page's text under a
 * `[Page n of N]` marker, at most `maxPages` pages and about `maxChars` characters
 * (`cut` says where it stopped, or is ""). An Error when it cannot be opened or
 * holds no text at all.
 */
export async function readPdf(file, { maxChars, maxPages = MAX_PDF_PAGES } = {}) {
  if (file.size > MAX_PDF_BYTES) {
    return new Error(`${file.name}: ${(file.size / 1048576).toFixed(0)} MB is more than `
      + `${MAX_PDF_BYTES / 1048576} MB; attach a smaller PDF.`);
  }
  const { getDocument } = await pdfjs();
  const task = getDocument({
    data: new Uint8Array(await file.arrayBuffer()),
    useWasm: false, // WebAssembly is not allowed by the page's policy: pdf.js uses JS
    stopAtErrors: false, verbosity: 0,
  });
  try {
    const doc = await task.promise;
    const pages = doc.numPages;
    const parts = [];
    let chars = 0, read = 0, found = 0, cut = "";
    for (let number = 1; number <= pages; number += 1) {
      if (number > maxPages) {
        cut = `only the first ${maxPages} of its ${pages} pages were read`;
        break;
      }
      const page = await doc.getPage(number);
      let text = pageText(await page.getTextContent());
      page.cleanup();
      if (text) found += 1;
      const room = maxChars - chars;
      if (text.length > room) {
        const last = room > 0 ? number : number - 1; // the page the bound falls in
        cut = `only ${maxChars.toLocaleString()} characters were read, up to page ${last} `
          + `of ${pages}`;
        if (room <= 0) break;
        text = text.slice(0, room);
      }
      parts.push(`[Page ${number} of ${pages}]\n${text}`);
      chars += text.length;
      read = number;
      if (cut) break;
    }
    if (!found) {
      return new Error(`${file.name} has no text to read: its pages are images (a scanned `
        + "PDF?), and this page does no OCR. Attach a PDF with a text layer, or its text.");
    }
    if (cut) parts.push(`[Not read: ${cut}.]`);
    return { text: parts.join("\n\n"), pages, read, cut };
  } catch (error) {
    return failure(file.name, error);
  } finally {
    await task.destroy(); // the worker too: it is started again for the next PDF
  }
}
