import { describe, expect, it } from 'vitest';
import { decimalText, microsToUsd, usdToMicros } from '../../../src/money/decimal.js';

describe('money', () => {
  it('converts USD to integer microdollars exactly, rounding half up', () => {
    expect(usdToMicros(0.1)).toBe(100_000);
    expect(usdToMicros(0.3)).toBe(300_000);
    expect(usdToMicros(12.345678)).toBe(12_345_678);
    expect(usdToMicros(0.0000005)).toBe(1);
    expect(usdToMicros(0.00000049)).toBe(0);
    expect(usdToMicros(1e-7)).toBe(0);
    expect(usdToMicros(1234567.891234)).toBe(1_234_567_891_234);
    expect(usdToMicros(0)).toBe(0);
  });

  it('refuses negative, infinite and unsafe amounts', () => {
    expect(() => usdToMicros(-1)).toThrow(RangeError);
    expect(() => usdToMicros(Number.POSITIVE_INFINITY)).toThrow(RangeError);
    expect(() => usdToMicros(1e13)).toThrow(RangeError);
  });

  it('turns microdollars back into the USD number a person would write', () => {
    expect(microsToUsd(300_000)).toBe(0.3);
    expect(microsToUsd('100000')).toBe(0.1);
    expect(microsToUsd(1)).toBe(0.000001);
  });

  it('writes the exact decimal text of a JSON number, exponent forms included', () => {
    expect(decimalText(1.5e-7)).toBe('0.00000015');
    expect(decimalText(0.1)).toBe('0.1');
    expect(decimalText(3)).toBe('3');
    expect(decimalText(2.5e-10)).toBe('0.00000000025');
    expect(decimalText(0.000003)).toBe('0.000003');
    expect(decimalText(1e21)).toBe('1000000000000000000000');
  });
});
