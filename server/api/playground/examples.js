// gramserve playground: the example schemas and tools offered in the side panels.

export const SCHEMA_EXAMPLES = [
  {
    name: "Person (exact)",
    prompt: "Describe a fictional person as JSON.",
    schema: {
      type: "object",
      properties: {
        name: { type: "string", maxLength: 40 },
        age: { type: "integer", minimum: 0, maximum: 120 },
        role: { enum: ["engineer", "artist", "teacher"] },
      },
      required: ["name", "age", "role"],
      additionalProperties: false,
    },
  },
  {
    name: "Order (one loose keyword)",
    prompt: "Write an order of two items as JSON.",
    schema: {
      type: "object",
      properties: {
        id: { type: "string", pattern: "^[A-Z]{3}-[0-9]{4}$" },
        items: { type: "array", minItems: 1, maxItems: 3, uniqueItems: true, items: { type: "string", maxLength: 20 } },
        date: { type: "string", format: "date" },
      },
      required: ["id", "items"],
      additionalProperties: false,
    },
  },
  {
    name: "Refused under strict (uniqueItems: no backend enforces it)",
    prompt: "Give a few tags as JSON.",
    schema: {
      type: "object",
      properties: { tags: { type: "array", items: { type: "string" }, uniqueItems: true } },
      required: ["tags"],
      additionalProperties: false,
    },
  },
];

const WEATHER_TOOL = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Get the current weather for a city.",
    parameters: {
      type: "object",
      properties: {
        city: { type: "string", maxLength: 40 },
        unit: { enum: ["celsius", "fahrenheit"] },
      },
      required: ["city"],
      additionalProperties: false,
    },
  },
};
export const TOOL_EXAMPLES = [
  { name: "Weather", prompt: "What is the weather in Paris?", tools: [WEATHER_TOOL] },
  {
    name: "Weather and calculator",
    prompt: "What is 17 times 23?",
    tools: [WEATHER_TOOL, {
      type: "function",
      function: {
        name: "multiply",
        description: "Multiply two integers.",
        parameters: {
          type: "object",
          properties: { a: { type: "integer" }, b: { type: "integer" } },
          required: ["a", "b"],
          additionalProperties: false,
        },
      },
    }],
  },
];
