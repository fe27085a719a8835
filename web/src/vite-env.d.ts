/// <reference types="vite/client" />

// diff2html's own declarations name its template engine, which ships none;
// the app never uses it directly.
declare module "@profoundlogic/hogan" {
  export type Template = unknown;
  export type Context = unknown;
  export type Partials = unknown;
}
