// The apply form's parameter fields, generated from the target's JSON Schema
// (`paramsSchema` of GET /api/v1/targets) and checked as the user types.
//
// Hand-written rather than taken from a library: the maintained JSON-Schema
// form libraries either need a framework (react-jsonschema-form, the JSON
// Forms renderers) or are a whole editor with themes, icon sets and a
// validator of their own (@json-editor/json-editor), several times the size
// of this app, for forms of a few scalar fields. A general validator such as
// Ajv would also word its messages its own way ("must be <= 500") where the
// page should say what the server says ("must be at most 500"). What the
// server accepts is the rule: the checks here only save a round trip, and
// the server checks every submission again.

import { h } from "./dom";
import type { JsonSchema, JsonValue } from "./types";

/** The generated fields of one target. */
export interface ParamsForm {
  /** One `.field` per property, in the schema's order. */
  readonly fields: HTMLElement[];
  /** No properties: the target takes no parameters, and the body has no `params`. */
  readonly empty: boolean;
  /** Checks every field and shows its message; returns the first invalid control, if any. */
  check(): HTMLElement | null;
  /** The values, typed as the schema says; an empty optional field is left out. */
  values(): Record<string, JsonValue>;
}

/** One property's field: its control and the slot its message goes into. */
interface Field {
  name: string;
  schema: JsonSchema;
  required: boolean;
  control: HTMLInputElement | HTMLSelectElement;
  slot: HTMLElement;
  /** The compiled `pattern`; null when there is none or the browser cannot compile it. */
  pattern: RegExp | null;
}

/** What a field holds now: a value to send, nothing (left out), or why it is invalid. */
type Reading = { value?: JsonValue; error?: string };

/** The schema of a target that only names its parameters: each one a string. */
export function namesOnly(names: string[]): JsonSchema {
  return {
    type: "object",
    properties: Object.fromEntries(names.map((name) => [name, { type: "string" }])),
    additionalProperties: false,
  };
}

/**
 * The fields for `schema`'s properties. `fieldError` makes the message slot
 * (`.field-error[data-field="params.<name>"]`), the page's own pattern, so
 * that the server's field errors land in the same place as these checks'.
 */
export function paramsForm(schema: JsonSchema, fieldError: (name: string) => HTMLElement): ParamsForm {
  const required = new Set(schema.required ?? []);
  const fields = Object.entries(schema.properties ?? {}).map(([name, property]) =>
    makeField(name, property, required.has(name), fieldError(`params.${name}`)));

  function show(field: Field): Reading {
    const reading = read(field);
    field.slot.textContent = reading.error ?? "";
    field.control.setAttribute("aria-invalid", String(reading.error !== undefined));
    return reading;
  }

  for (const field of fields) {
    const recheck = () => void show(field);
    field.control.addEventListener("input", recheck);
    field.control.addEventListener("change", recheck);
  }

  return {
    fields: fields.map(render),
    empty: fields.length === 0,
    check() {
      let first: HTMLElement | null = null;
      for (const field of fields) {
        if (show(field).error !== undefined) first ??= field.control;
      }
      return first;
    },
    values() {
      const values: Record<string, JsonValue> = {};
      for (const field of fields) {
        const { value } = read(field);
        if (value !== undefined) values[field.name] = value;
      }
      return values;
    },
  };
}

function makeField(name: string, schema: JsonSchema, required: boolean, slot: HTMLElement): Field {
  const id = `param-${name}`;
  slot.id = `${id}-error`;
  const common = {
    id,
    name: id,
    "data-param": name,
    required,
    "aria-describedby": [schema.description ? `${id}-help` : null, slot.id].filter(Boolean).join(" "),
  };
  let control: HTMLInputElement | HTMLSelectElement;
  if (schema.enum) {
    const options = schema.enum.map((value) =>
      h("option", { value: optionValue(value), selected: value === schema.default }, optionValue(value)));
    // A way to leave it out (optional) or a prompt to choose (no default).
    const withDefault = schema.enum.some((value) => value === schema.default);
    const blank = !required || !withDefault
      ? h("option", { value: "", selected: !withDefault }, required ? "Choose one" : "(not set)")
      : null;
    control = h("select", common, blank, options);
  } else if (schema.type === "boolean") {
    control = h("input", { ...common, type: "checkbox", checked: schema.default === true });
  } else if (schema.type === "integer" || schema.type === "number") {
    control = h("input", {
      ...common,
      type: "number",
      step: schema.type === "integer" ? 1 : "any",
      min: schema.minimum,
      max: schema.maximum,
      value: typeof schema.default === "number" ? String(schema.default) : null,
    });
  } else {
    control = h("input", {
      ...common,
      type: "text",
      value: typeof schema.default === "string" ? schema.default : null,
    });
  }
  return { name, schema, required, control, slot, pattern: compile(schema.pattern) };
}

function render(field: Field): HTMLElement {
  const { name, schema, required, control, slot } = field;
  const text = [schema.title ?? name, required ? h("span", { class: "required", title: "required" }, " *") : null];
  const help = schema.description
    ? h("p", { class: "hint", id: `${control.id}-help` }, schema.description)
    : null;
  if (control instanceof HTMLInputElement && control.type === "checkbox") {
    return h("div", { class: "field" }, h("label", { class: "check", for: control.id }, control, ...text), help, slot);
  }
  return h("div", { class: "field" }, h("label", { for: control.id }, ...text), control, help, slot);
}

/** The field's value, or the first rule it breaks, in the server's words where they overlap. */
function read(field: Field): Reading {
  const { schema, control, required } = field;
  const missing: Reading = required ? { error: "is required" } : {};
  if (control instanceof HTMLSelectElement) {
    if (control.value === "") return missing;
    const value = schema.enum?.find((v) => optionValue(v) === control.value);
    return value === undefined ? { error: `must be one of: ${(schema.enum ?? []).map(optionValue).join(", ")}` } : { value };
  }
  if (control.type === "checkbox") return { value: control.checked };
  if (control.type === "number") {
    // What the browser cannot read as a number it reports as empty, with badInput set.
    if (control.validity.badInput) return { error: schema.type === "integer" ? "must be a whole number" : "must be a number" };
    if (control.value === "") return missing;
    const value = Number(control.value);
    if (!Number.isFinite(value)) return { error: "must be a number" };
    const error = numberError(schema, value);
    return error ? { error } : { value };
  }
  const value = control.value;
  if (value === "") return missing;
  const error = stringError(field, value);
  return error ? { error } : { value };
}

function numberError(schema: JsonSchema, value: number): string | null {
  if (schema.type === "integer" && !Number.isInteger(value)) return "must be a whole number";
  if (schema.minimum !== undefined && value < schema.minimum) return `must be at least ${schema.minimum}`;
  if (schema.maximum !== undefined && value > schema.maximum) return `must be at most ${schema.maximum}`;
  if (schema.exclusiveMinimum !== undefined && value <= schema.exclusiveMinimum) {
    return `must be more than ${schema.exclusiveMinimum}`;
  }
  if (schema.exclusiveMaximum !== undefined && value >= schema.exclusiveMaximum) {
    return `must be less than ${schema.exclusiveMaximum}`;
  }
  return null;
}

function stringError(field: Field, value: string): string | null {
  const { schema, pattern } = field;
  // JSON Schema counts characters (code points), not UTF-16 units.
  const length = Array.from(value).length;
  if (schema.minLength !== undefined && length < schema.minLength) return `must be at least ${schema.minLength} characters`;
  if (schema.maxLength !== undefined && length > schema.maxLength) return `must be at most ${schema.maxLength} characters`;
  if (pattern && !pattern.test(value)) return `must match the pattern ${schema.pattern}`;
  return null;
}

/** A schema's `pattern` (ECMA-262, unanchored as JSON Schema says); one the browser cannot compile is left to the server. */
function compile(pattern: string | undefined): RegExp | null {
  if (pattern === undefined) return null;
  try {
    return new RegExp(pattern, "u");
  } catch {
    return null;
  }
}

/** An `enum` entry as an option's value and text. */
function optionValue(value: JsonValue): string {
  return typeof value === "string" ? value : JSON.stringify(value);
}
