/**
 * The wire schemas now live in src/contract/, one file per resource; this module re-exports them
 * for the routes that import from here.
 */
export * from '../contract/index.js';
