// The @google/genai SDK's calls against Parlance's Gemini API (run with node from the
// package's install dir): each part reports what the SDK parsed.
// PARLANCE_URL: the server; PARLANCE_MODEL: the model; PARLANCE_PARTS: which parts.
import { GoogleGenAI, FunctionCallingConfigMode, Type } from "@google/genai";

const ai = new GoogleGenAI({ apiKey: "unused",
                             httpOptions: { baseUrl: process.env.PARLANCE_URL,
                                            timeout: 1800000 } });
const model = process.env.PARLANCE_MODEL;
const wanted = (process.env.PARLANCE_PARTS || "").split(",").filter(Boolean);
// The call's city and the person are bounded by their schemas (ASCII names of at most
// 24 letters, an age of at most 3 digits), so the grammar ends them well inside
// maxOutputTokens whatever a sampled tiny model writes: a string cut by the token limit
// is JSON no client can parse.
const NAME = { type: "string", pattern: "^[A-Za-z ]{1,24}$" };
const AGE = { type: "integer", minimum: 0, maximum: 150 };
const WEATHER = { name: "get_weather", description: "Current weather in a city",
                  parametersJsonSchema: { type: "object", required: ["city"],
                                          properties: { city: NAME } } };
const PERSON = { type: "object", properties: { name: NAME, age: AGE },
                 required: ["name", "age"] };
const finish = (r) => r.candidates[0].finishReason;

const parts = {
  async text() {
    const r = await ai.models.generateContent({ model, contents: "Say hello.",
      config: { maxOutputTokens: 16, temperature: 0, systemInstruction: "Be brief." } });
    return { text: r.text, finish: finish(r), total: r.usageMetadata.totalTokenCount,
             model_version: r.modelVersion, response_id: r.responseId };
  },
  async stream() {
    let text = "", chunks = 0, last;
    for await (const chunk of await ai.models.generateContentStream({ model,
        contents: "Count to five.", config: { maxOutputTokens: 16, temperature: 0 } })) {
      text += chunk.text ?? "";
      chunks += 1;
      last = chunk;
    }
    return { text, chunks, finish: finish(last) };
  },
  async forced_call() {
    const config = { tools: [{ functionDeclarations: [WEATHER] }], maxOutputTokens: 64,
      toolConfig: { functionCallingConfig: { mode: FunctionCallingConfigMode.ANY,
                                             allowedFunctionNames: ["get_weather"] } } };
    const asked = { role: "user", parts: [{ text: "Weather in Paris?" }] };
    const r = await ai.models.generateContent({ model, contents: [asked], config });
    const calls = r.functionCalls ?? [];
    const answer = { role: "user", parts: [{ functionResponse: {
      id: calls[0].id, name: calls[0].name, response: { output: "Sunny, 21 C" } } }] };
    const followed = await ai.models.generateContent({ model,
      contents: [asked, r.candidates[0].content, answer],
      config: { tools: config.tools, maxOutputTokens: 16 } });
    return { calls: calls.map((c) => ({ name: c.name, args: c.args, id: c.id })),
             finish: finish(r), followed: finish(followed) };
  },
  async structured() {
    const byJson = await ai.models.generateContent({ model, contents: "Invent a person.",
      config: { responseMimeType: "application/json", responseJsonSchema: PERSON,
                maxOutputTokens: 64 } });
    const bySchema = await ai.models.generateContent({ model, contents: "Invent a person.",
      config: { responseMimeType: "application/json", maxOutputTokens: 64,
                responseSchema: { type: Type.OBJECT, required: ["name", "age"],
                                  properties: { name: { ...NAME, type: Type.STRING },
                                                age: { ...AGE, type: Type.INTEGER } } } } });
    return { json_schema: JSON.parse(byJson.text), schema: JSON.parse(bySchema.text) };
  },
  async thinking() {
    const config = { thinkingConfig: { includeThoughts: true, thinkingBudget: 64 },
                     maxOutputTokens: 96 };
    const asked = { role: "user", parts: [{ text: "Why is the sky blue?" }] };
    const r = await ai.models.generateContent({ model, contents: [asked], config });
    const got = r.candidates[0].content.parts ?? [];
    const again = await ai.models.generateContent({ model, config, contents: [asked,
      r.candidates[0].content, { role: "user", parts: [{ text: "And at sunset?" }] }] });
    return { thoughts: got.filter((p) => p.thought).map((p) => p.text),
             answer: got.filter((p) => !p.thought).map((p) => p.text ?? "").join(""),
             signed: got.map((p) => p.thoughtSignature !== undefined),
             thoughts_tokens: r.usageMetadata.thoughtsTokenCount, again: finish(again) };
  },
  async count() {
    const r = await ai.models.countTokens({ model, contents: "Hello there, how are you?" });
    return { total: r.totalTokens };
  },
  async embed() {
    const r = await ai.models.embedContent({ model, contents: ["the cat sat", "on the mat"],
      config: { outputDimensionality: 8, taskType: "RETRIEVAL_QUERY" } });
    return { sizes: r.embeddings.map((e) => e.values.length) };
  },
  async models() {
    const listed = [];
    for await (const m of await ai.models.list()) listed.push(m.name);
    const one = await ai.models.get({ model });
    return { listed, one: one.name };
  },
  async refused() {
    try {
      await ai.models.generateContent({ model: "no-such-model", contents: "Hi" });
      return { error: "no-such-model was answered" };
    } catch (error) {
      if (error.status === undefined) throw error;
      return { status: error.status, message: error.message };
    }
  },
};

const out = {};
for (const [name, run] of Object.entries(parts)) {
  if (wanted.length && !wanted.includes(name)) continue;
  try {
    out[name] = await run();
  } catch (error) {
    out[name] = { error: `${error.name}: ${error.message}` };
  }
}
console.log(JSON.stringify(out));
