/**
 * Run before every test file: registered first, this afterAll runs after the file's own (vitest
 * runs after-hooks in reverse), so daemons the file started have stopped writing by then.
 */
import { afterAll } from 'vitest';
import { deleteTestKeys } from './services.js';

afterAll(deleteTestKeys);
