import { describe, expect, it } from 'vitest';
import { compileRoutes } from '../../shared/services/api/route-matcher.js';

const matcher = compileRoutes({
  create_session: 'create',
  'client/config': 'config',
  'samplers/{sampler_id}': 'sampler',
  'training_runs/{run}': 'run',
  'training_runs/{run}/checkpoints': 'checkpoints',
  'training_runs/{run}/checkpoints/{kind}/{name}/archive': 'archive',
  'training_runs/{run}/checkpoints/{kind}/{name}': 'checkpoint',
  'training_runs/latest': 'latest',
});

describe('route matcher', () => {
  it('finds literal routes with no parameters', () => {
    expect(matcher.match('create_session')).toEqual({ route: 'create', params: {} });
    expect(matcher.match('client/config')?.route).toBe('config');
  });

  it('binds each {param} to one decoded segment', () => {
    expect(matcher.match('samplers/samp-1')).toEqual({ route: 'sampler', params: { sampler_id: 'samp-1' } });
    expect(matcher.match('training_runs/model-1/checkpoints/weights/step-1/archive')).toEqual({
      route: 'archive',
      params: { run: 'model-1', kind: 'weights', name: 'step-1' },
    });
    expect(matcher.match('training_runs/model-1/checkpoints/sampler_weights/a')?.route).toBe('checkpoint');
    expect(matcher.match('training_runs/model-1/checkpoints')?.route).toBe('checkpoints');
    expect(matcher.match('samplers/sess%3Asample%3A0')?.params).toEqual({ sampler_id: 'sess:sample:0' });
  });

  it('prefers a literal segment over a parameter', () => {
    expect(matcher.match('training_runs/latest')?.route).toBe('latest');
    expect(matcher.match('training_runs/other')).toEqual({ route: 'run', params: { run: 'other' } });
  });

  it('never reaches Object.prototype, as a route or as a parameter', () => {
    for (const name of ['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'valueOf']) {
      expect(matcher.match(name), name).toBeUndefined();
    }
    const proto = matcher.match('samplers/__proto__');
    expect(proto?.params.sampler_id).toBe('__proto__');
    expect(Object.getPrototypeOf(proto?.params)).toBeNull();
    expect(matcher.match('samplers/constructor')?.params).toEqual({ sampler_id: 'constructor' });
  });

  it('matches nothing for wrong segment counts, empty, slashed or malformed parameters', () => {
    for (const path of [
      '',
      'samplers',
      'samplers/',
      'samplers/a/b',
      'samplers/a%2Fb',
      'samplers/%E0%A4%A',
      '/samplers/a',
      'Samplers/a',
      'training_runs//checkpoints',
      'create_session/',
    ]) {
      expect(matcher.match(path), path).toBeUndefined();
    }
  });

  it('refuses tables that are ambiguous or malformed', () => {
    expect(() => compileRoutes({ 'a/{x}': 1, 'a/{y}': 2 })).toThrow(/match the same paths/);
    expect(() => compileRoutes({ 'a/{x}/{x}': 1 })).toThrow(/appears twice/);
    expect(() => compileRoutes({ 'a//b': 1 })).toThrow(/bad segment/);
    expect(() => compileRoutes({ 'a/{x': 1 })).toThrow(/bad segment/);
  });
});
