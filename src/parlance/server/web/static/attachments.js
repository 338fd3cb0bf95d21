// Files attached to a message: text and code files, and the text of PDFs, are read in
// this browser and sent inside the message (each in a <file name="…"> block), so any
// model can read them. Images and other binary files are refused with the reason: no
// engine of this server takes image input yet, whatever the model.

export const MAX_FILE_CHARS = 200_000;
const TEXT_TYPES = /^(text\/|application\/(json|xml|javascript|x-yaml|x-sh|toml|sql|x-python))/;
const TEXT_NAMES = /\.(txt|md|markdown|rst|csv|tsv|json|jsonl|yaml|yml|toml|ini|cfg|conf|xml|html|css|js|mjs|ts|tsx|jsx|py|rb|go|rs|c|h|cc|cpp|hpp|java|kt|swift|cs|php|sh|bash|zsh|sql|r|jl|lua|pl|scala|hs|ex|exs|erl|clj|dart|vue|svelte|tex|log|diff|patch|gitignore|dockerfile|makefile)$/i;

const PDF = (file) => file.type === "application/pdf" || /\.pdf$/i.test(file.name);

/** The file as an attachment {name, text, note?} (`note`: what was left out of a long
 * PDF), or an Error saying why it cannot be one. */
export async function readAttachment(file) {
  const name = file.name.replace(/["<>]/g, "_");
  if (PDF(file)) {
    const { readPdf } = await import("./pdftext.js"); // pdf.js only when a PDF comes
    const read = await readPdf(file, { maxChars: MAX_FILE_CHARS });
    if (read instanceof Error) return read;
    return read.cut ? { name, text: read.text, note: read.cut } : { name, text: read.text };
  }
  const textual = TEXT_TYPES.test(file.type) || TEXT_NAMES.test(file.name)
    || (!file.type && !/\.[a-z0-9]+$/i.test(file.name));
  if (file.type.startsWith("image/")) {
    return new Error(`${file.name}: images cannot be attached: this server's engines take `
      + "no image input yet, for any model. Attach text, code or PDF files.");
  }
  if (!textual) {
    return new Error(`${file.name}: only text, code and PDF files can be attached.`);
  }
  const text = await file.text();
  if (text.includes("\u0000")) return new Error(`${file.name}: this is not a text file.`);
  if (text.length > MAX_FILE_CHARS) {
    return new Error(`${file.name}: ${text.length.toLocaleString()} characters is more than `
      + `${MAX_FILE_CHARS.toLocaleString()}; attach a smaller part.`);
  }
  return { name, text };
}
