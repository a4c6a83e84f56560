/**
 * TypeBox, as the daemon's modules import it: from here, never from 'typebox' itself. The package
 * is some 700 module files, and loading them cost every start of a daemon ~0.4 s of CPU (the route
 * schemas are built with it at start). The build replaces this module's output,
 * dist/contract/typebox.js, with the same package bundled into one file
 * (scripts/bundle-typebox.mjs), which loads in a tenth of that: the same code, so the schemas, and
 * what Ajv compiles from them, are the same. Tests and scripts that run the sources load the
 * package as it is.
 */
export * from 'typebox';
