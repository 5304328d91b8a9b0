// The Vercel AI SDK against the gateway: generateText or streamText with one tool.
// Usage: node vercel_ai.mjs <generate|stream|stateless> <baseURL> <apiKey> <model>; prints one JSON line.
// stateless: generateText with store: false, so each step sends the history back itself.
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, jsonSchema, stepCountIs, streamText, tool } from "ai";

const [mode, baseURL, apiKey, model] = process.argv.slice(2);
const provider = createOpenAI({ baseURL, apiKey });
const getWeather = tool({
  description: "The weather in a city.",
  inputSchema: jsonSchema({
    type: "object",
    properties: { city: { type: "string" } },
    required: ["city"],
    additionalProperties: false,
  }),
  execute: async ({ city }) => `Sunny in ${city}, 21C`,
});
const options = {
  model: provider.responses(model),
  prompt: "Weather in Paris?",
  tools: { get_weather: getWeather },
  stopWhen: stepCountIs(3),
  // Reasoning shows as text only from summaries: the SDK reads reasoning items' `summary` parts.
  // (and only for models it knows reason, or with forceReasoning: a gateway model name is unknown to it).
  providerOptions: { openai: { forceReasoning: true, reasoningSummary: "auto", store: mode !== "stateless" } },
};

if (mode === "generate" || mode === "stateless") {
  const result = await generateText(options);
  // reasoningText is the last step's; the reasoning came with the tool call, in the first step.
  const reasoning = result.steps.map((s) => s.reasoningText ?? "").join("");
  console.log(JSON.stringify({ text: result.text, steps: result.steps.length,
    reasoning: reasoning || null, finishReason: result.finishReason }));
} else {
  const result = streamText(options);
  const parts = [];
  let reasoning = "";
  for await (const part of result.fullStream) {
    parts.push(part.type);
    if (part.type === "reasoning-delta") reasoning += part.text;
    if (part.type === "error") throw part.error;
  }
  console.log(JSON.stringify({ text: await result.text, parts, reasoning: reasoning || null }));
}
